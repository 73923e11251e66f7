//! A whole run: every scenario on every backend given, beside its peers,
//! and the report of it.

use std::time::Duration;

use crate::cli::Args;
use crate::durability::MeasuredServer;
use crate::kinds::{KindOutcome, KindRun, KindSummary};
use crate::mix::Mix;
use crate::names::bench_name;
use crate::open_files;
use crate::ours::our_workers;
use crate::outcome::Outcome;
use crate::peers::Tooz;
use crate::report::{BackendResults, Contended, Contestant, Run, Settings};
use crate::scale_out::ScaleOut;
use crate::scaling::{self, Plan};
use crate::scenario::Scenario;
use crate::stamp::Stamp;
use crate::target::{Server, Target};
use crate::url_kind::kind_of_url;
use crate::worker::{Layout, Window, Workload};
use crate::{
    charts, commands, durability, etcd_peer, etcdctl, flock_baseline, gather, kinds, objectstore,
    peers, pg_peer, quiet, redis_peers, report, sections, uncontended,
};

/// The `--only` value that selects the scale-out forms.
const SCALE_OUT: &str = "scale-out";

/// Time for Rust workers to start and connect before the window opens.
const RUST_STARTUP: Duration = Duration::from_millis(1500);
/// Time for each Python worker to start: importing tooz takes a while, and
/// they all start at once on a machine with few cores.
const PYTHON_STARTUP_PER_PROCESS: Duration = Duration::from_millis(750);

/// The longest wait for a quiet machine before an uncontended scenario.
const QUIET_PATIENCE: Duration = Duration::from_secs(30);

/// Says on the terminal what runs now, and for how long.
fn say(what: &str, seconds: Duration) {
    eprintln!("   {what} for {}", humantime::format_duration(seconds));
}

/// Runs every scenario on every backend `args` gives, and writes the report.
pub(crate) async fn bench(args: &Args) -> Outcome<()> {
    // Read before anything runs: the commit and changes the run is built from.
    // The report and the charts beside it are what this run writes.
    let charts_dir = args.write.as_deref().map(charts::dir_beside);
    let written: Vec<&std::path::Path> = args
        .write
        .as_deref()
        .into_iter()
        .chain(charts_dir.as_deref())
        .collect();
    let stamp = Stamp::now(&written);
    let temp = std::env::temp_dir().join(format!("distlock-bench-{}", std::process::id()));
    let mut backends = if args.backends.is_empty() {
        vec![format!("file://{}", temp.display())]
    } else {
        args.backends.clone()
    };
    let measured_servers = durability::measured_servers(&args.measured_servers)?;
    if let Some(stray) = measured_servers
        .iter()
        .find(|server| !backends.contains(&server.beside))
    {
        return Err(format!(
            "--measured-server names {}, which no --backend gives",
            distlock::redact(&stray.beside)
        ));
    }
    let scale_out_only = args
        .only
        .iter()
        .any(|only| only.eq_ignore_ascii_case(SCALE_OUT));
    if !args.only.is_empty() {
        // The kinds that some backend given spreads over several servers.
        let scaled: Vec<&str> = backends
            .iter()
            .filter(|url| ScaleOut::of_url(url).is_some())
            .map(|url| kind_of_url(url))
            .collect();
        backends.retain(|url| {
            let kind = kind_of_url(url);
            args.only.iter().any(|only| only.eq_ignore_ascii_case(kind))
                || (scale_out_only && scaled.contains(&kind))
        });
        if backends.is_empty() {
            return Err(format!(
                "no backend given is of a kind in --only {}",
                args.only.join(", ")
            ));
        }
    }
    let no_peers = args.no_peers || scale_out_only;
    // etcdctl runs only beside an etcd backend, and only with the peers.
    let etcdctl = args
        .etcdctl
        .as_deref()
        .filter(|_| !no_peers && backends.iter().any(|url| kind_of_url(url) == "etcd"));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let has_memcached = backends.iter().any(|url| kind_of_url(url) == "memcached");
    let tooz = match (&args.tooz, no_peers || !has_memcached) {
        (Some(script), false) => Some(Tooz {
            python: args.python.clone(),
            script: script.clone(),
        }),
        _ => None,
    };
    // This command line, with the credentials of every URL in it hidden.
    let command = args.command.clone().unwrap_or_else(|| {
        std::env::args()
            .map(|arg| {
                if arg.contains("://") {
                    distlock::redact(&arg)
                } else {
                    arg
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    });
    let kinds = only_kinds(&args.only, &backends);
    let mut notes = args.notes.clone();
    if let Some(bin) = etcdctl
        && let Some(url) = backends
            .iter()
            .find(|url| kind_of_url(url) == "etcd" && ScaleOut::of_url(url).is_none())
        && let Some(version) = etcdctl::Etcdctl::for_url(bin, url)?.version().await
    {
        notes.push(version);
    }
    let mut run = Run::new(
        command.clone(),
        Settings {
            seconds: args.seconds,
            uncontended_seconds: args.uncontended_seconds,
            processes: args.processes,
            tasks: args.tasks,
            work: args.work,
            single_task_processes: args.single_task_processes,
        },
        notes,
    );
    run.durability = durability::durabilities(&args.durability)?;
    if let Some(tooz) = &tooz {
        run.tooz_versions = Some(tooz.versions().await?);
    }
    #[cfg(not(feature = "etcd-client-peer"))]
    if !no_peers && backends.iter().any(|url| kind_of_url(url) == "etcd") {
        eprintln!("note: {}", etcd_peer::NOT_BUILT);
        run.left_out.push(etcd_peer::NOT_BUILT.to_owned());
    }
    let mut targets = Vec::new();
    for url in &backends {
        let target = Target::open(url).await?;
        let server_version = match &target.server {
            // The single-server form says which version it runs.
            _ if target.scale_out.is_some() => None,
            Server::Mongo { database, .. } => commands::mongo_version(database).await,
            Server::Memcached(backend) => commands::memcached_version(backend).await,
            Server::Etcd(Some(metrics)) => metrics.version().await,
            Server::Postgres(stats) => stats.version().await,
            Server::PostgresStatements(statements) => statements.stats().version().await,
            Server::Redis(server) => server.version().await,
            // The `Server` header of the probe's answers, when it opened.
            Server::ObjectStore(server) => server.requests.server(),
            Server::Etcd(None) | Server::Uncounted => None,
        };
        targets.push((target, server_version));
    }
    // Peers, the semaphore and reader-writer scenarios and the many locks
    // run on the single-server forms only, unless only the scale-out forms
    // are asked for.
    let full = |target: &Target| !scale_out_only && target.scale_out.is_none();
    // One scenario at a time for every backend, section 4's curves last:
    // the servers' background work after their many locks (SecantusDB's
    // TTL monitor, say) then disturbs no other measurement.
    let mut partial = Vec::new();
    for (target, _) in &targets {
        eprintln!("== {} ({})", target.shown, target.label());
        let is_memcached = matches!(target.server, Server::Memcached(_));
        let quiet = quiet::until_quiet(QUIET_PATIENCE).await;
        eprintln!(
            "   waited {} for a quiet machine ({})",
            humantime::format_duration(Duration::from_millis(quiet.waited.as_millis() as u64)),
            quiet.busy.map_or("busyness unknown".into(), |busy| format!(
                "{:.0} % busy",
                busy * 100.0
            ))
        );
        say("uncontended", args.uncontended_seconds);
        let with_peers = full(target) && !no_peers && !target.fair();
        let beside: Vec<&MeasuredServer> = measured_servers
            .iter()
            .filter(|server| server.beside == target.url)
            .collect();
        let mut uncontended = uncontended::uncontended(
            target,
            args.uncontended_seconds,
            with_peers,
            etcdctl,
            &beside,
        )
        .await?;
        uncontended.quiet = Some(quiet);
        let tooz_uncontended = match (&tooz, is_memcached && with_peers) {
            (Some(tooz), true) => {
                // As long as each of our contenders had in its rounds.
                let seconds = args.uncontended_seconds / 3;
                say("uncontended, tooz", seconds);
                let name = bench_name("tooz-uncontended");
                Some(tooz.uncontended(target, name.as_str(), seconds).await?)
            }
            _ => None,
        };
        partial.push((uncontended, tooz_uncontended));
    }
    let mut all_contended = Vec::new();
    for (target, _) in &targets {
        eprintln!("== {} ({})", target.shown, target.label());
        // A fair form is set beside its ordinary form's peers; the
        // scale-out forms leave out the processes of one task.
        let peers = full(target) && !no_peers && !target.fair();
        let single_task_processes = if full(target) {
            args.single_task_processes
        } else {
            0
        };
        let scenarios = Scenario::all(args.work, single_task_processes);
        all_contended
            .push(contended_runs(args, &exe, target, &scenarios, peers, tooz.as_ref()).await?);
    }
    let mut all_kinds = Vec::new();
    for (target, _) in &targets {
        // Fair mode orders whole locks only, and leaves holding many alone.
        if full(target) && !target.fair() {
            eprintln!("== {} ({})", target.shown, target.label());
            all_kinds.push(kind_runs(args, &exe, target).await?);
        } else {
            all_kinds.push(Vec::new());
        }
    }
    // What a waiter costs while a lock is held, where waiting is polling
    // the store (an object store).
    let mut all_polling = Vec::new();
    for (target, _) in &targets {
        let polls = matches!(target.server, Server::ObjectStore(_)) && full(target);
        all_polling.push(if polls {
            eprintln!("== {} ({}): a waiter polling", target.shown, target.label());
            say("one holder and one waiter", args.polling_seconds);
            Some(objectstore::polling::measure(&target.url, args.polling_seconds).await)
        } else {
            None
        });
    }
    let plans: Vec<(&Target, Plan)> = targets
        .iter()
        .map(|(target, _)| (target, Plan::of(target, full(target))))
        .collect();
    // Only the file backend keeps a descriptor open per held lock.
    if plans
        .iter()
        .any(|(target, plan)| plan.held && kind_of_url(&target.url) == "file")
    {
        let largest = args.held.iter().copied().max().unwrap_or(0);
        run.open_files = Some(open_files::raise_for(largest));
    }
    let all_curves = scaling::measure(args, &exe, &plans).await;
    for (
        (
            ((((target, server_version), (uncontended, tooz_uncontended)), contended), kinds),
            polling,
        ),
        curves,
    ) in targets
        .iter()
        .zip(partial)
        .zip(all_contended)
        .zip(all_kinds)
        .zip(all_polling)
        .zip(all_curves)
    {
        run.backends.push(BackendResults {
            kind: target.kind(),
            label: target.label(),
            scale_out: target.scale_out,
            advisory_mode: target.advisory_mode(),
            fair: target.fair(),
            url: target.shown.clone(),
            server_version: server_version.clone(),
            uncontended,
            tooz_uncontended,
            contended,
            kinds,
            polling,
            curves,
        });
    }
    let _ = std::fs::remove_dir_all(&temp);
    if args.write.is_some() {
        run.charts_dir = Some(charts::DIR.to_owned());
        run.chart_prefix = charts::partial_prefix(&kinds);
    }
    let report = run.to_markdown(&stamp);
    let markdown = if kinds.is_empty() {
        format!("{}{report}", report::TITLE)
    } else {
        let part = sections::partial_part(
            &kinds,
            &stamp.line(&format!("`{command}`; each section says its settings")),
            &report,
        );
        match &args.write {
            Some(path) => sections::merge(&existing_report(path)?, &kinds, &part),
            None => part,
        }
    };
    match &args.write {
        Some(path) => {
            std::fs::write(path, markdown)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            write_charts(&run, &stamp, path)?;
        }
        None => print!("{markdown}"),
    }
    Ok(())
}

/// The kinds `--only` asked for, spelt as the report spells them where a
/// backend given is of that kind (`scale-out` as given).
fn only_kinds(only: &[String], backends: &[String]) -> Vec<String> {
    only.iter()
        .map(|asked| {
            backends
                .iter()
                .map(|url| kind_of_url(url))
                .find(|kind| kind.eq_ignore_ascii_case(asked))
                .map_or_else(|| asked.clone(), str::to_owned)
        })
        .collect()
}

/// The report file an earlier run wrote at `path`, which a partial run
/// merges into; just the file's head if there is none yet.
fn existing_report(path: &std::path::Path) -> Outcome<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(report::TITLE.to_owned()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Draws the run's charts into [`charts::DIR`] beside the report at
/// `report`, each captioned with this run's commit and backends. A run
/// that draws none (`--only scale-out`) leaves the charts there as they
/// were: their captions name the run they came from.
fn write_charts(run: &Run, stamp: &Stamp, report: &std::path::Path) -> Outcome<()> {
    let dir = charts::dir_beside(report);
    if run.chart_prefix.is_empty() {
        charts::remove_partial(&dir)?;
    }
    let mut charts = run.hand_off_charts();
    charts.extend(run.charts());
    if charts.is_empty() {
        return Ok(());
    }
    for chart in &mut charts {
        chart.file = format!("{}{}", run.chart_prefix, chart.file).into();
    }
    let labels: Vec<String> = run
        .backends
        .iter()
        .filter(|b| b.curves.measured_any() || (b.scale_out.is_none() && !b.contended.is_empty()))
        .map(|b| b.label.clone())
        .collect();
    for file in charts::write_all(&dir, &charts, &charts::caption(stamp, &labels))? {
        eprintln!("   wrote {file}");
    }
    Ok(())
}

/// Every contended run on one backend: ours and, with `peers`, its peers',
/// in every scenario of `scenarios`.
async fn contended_runs(
    args: &Args,
    exe: &std::path::Path,
    target: &Target,
    scenarios: &[Scenario],
    peers: bool,
    tooz: Option<&Tooz>,
) -> Outcome<Vec<Contended>> {
    let is_mongo = matches!(target.server, Server::Mongo { .. }) && peers;
    let is_memcached = matches!(target.server, Server::Memcached(_)) && peers;
    let is_etcd = matches!(target.server, Server::Etcd(_)) && peers;
    let is_postgres = matches!(target.server, Server::Postgres(_)) && peers;
    let is_redis = matches!(target.server, Server::Redis(_)) && peers;
    let is_file = target.url.starts_with("file:") && peers;
    let mut contended = Vec::new();
    for &scenario in scenarios {
        let (processes, tasks) = scenario.processes_and_tasks(args.processes, args.tasks);
        let label = scenario.label();
        let run = |by, what: String, slug: &'static str| ContendedRun {
            args,
            target,
            scenario,
            by,
            what,
            slug,
        };
        let ours = format!("contended ({label}): {processes} processes x {tasks} tasks");
        contended.push(
            run(Contestant::Ours, ours, "contended")
                .contend(RUST_STARTUP, |lock, layout| {
                    Ok(our_workers(exe, target, lock, layout, Mix::Exclusive))
                })
                .await?,
        );
        if is_mongo {
            let what = format!("contended ({label}), distributed-lock-mongo (defaults)");
            contended.push(
                run(Contestant::MongoPeer, what, "peer-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(peers::mongo_workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if is_etcd && etcd_peer::BUILT {
            let what = format!("contended ({label}), etcd's Lock RPC");
            contended.push(
                run(Contestant::EtcdLockRpc, what, "etcd-peer-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(etcd_peer::workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if is_postgres {
            let what = format!("contended ({label}), sqlx's PgAdvisoryLock");
            contended.push(
                run(Contestant::PgAdvisoryLock, what, "pg-advisory-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(pg_peer::workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if is_redis {
            for (peer, by, name, slug) in [
                (
                    redis_peers::Peer::Rslock,
                    Contestant::Rslock,
                    "rslock",
                    "rslock-contended",
                ),
                (
                    redis_peers::Peer::Redlock,
                    Contestant::Redlock,
                    "redlock",
                    "redlock-contended",
                ),
            ] {
                let what = format!("contended ({label}), {name}");
                contended.push(
                    run(by, what, slug)
                        .contend(RUST_STARTUP, |lock, layout| {
                            Ok(redis_peers::workers(
                                exe,
                                &target.url,
                                peer,
                                lock.as_str(),
                                layout,
                            ))
                        })
                        .await?,
                );
            }
        }
        if is_file {
            let what = format!("contended ({label}), raw blocking flock");
            contended.push(
                run(Contestant::RawFlock, what, "raw-flock-contended")
                    .contend(RUST_STARTUP, |lock, layout| {
                        Ok(flock_baseline::workers(exe, target, lock.as_str(), layout))
                    })
                    .await?,
            );
        }
        if let (Some(tooz), true) = (tooz, is_memcached) {
            let what = format!("contended ({label}), tooz");
            let startup = PYTHON_STARTUP_PER_PROCESS * processes;
            contended.push(
                run(Contestant::Tooz, what, "tooz-contended")
                    .contend(startup, |lock, layout| {
                        tooz.workers(target, lock.as_str(), layout)
                    })
                    .await?,
            );
        }
    }
    Ok(contended)
}

/// One contended run of one contestant in one scenario.
struct ContendedRun<'a> {
    args: &'a Args,
    target: &'a Target,
    scenario: Scenario,
    by: Contestant,
    /// What the run says it does as it starts.
    what: String,
    /// Its lock's name starts with this.
    slug: &'static str,
}

impl ContendedRun<'_> {
    /// Says what runs, starts the workers `start` makes for a lock of this
    /// run's own and a window opening after `startup`, and gathers what
    /// they did.
    async fn contend(
        self,
        startup: Duration,
        start: impl FnOnce(&distlock::LockName, Layout) -> Outcome<Vec<tokio::process::Command>>,
    ) -> Outcome<Contended> {
        say(&self.what, self.args.seconds);
        let window = Window::after(startup, self.args.seconds);
        let (processes, tasks) = self
            .scenario
            .processes_and_tasks(self.args.processes, self.args.tasks);
        let workload = self.scenario.workload;
        let layout = Layout {
            processes,
            tasks,
            window,
            workload,
        };
        let workers = start(&bench_name(self.slug), layout)?;
        Ok(Contended {
            by: self.by,
            scenario: self.scenario,
            result: gather::contend(self.target, workers, window, workload.rounds()).await?,
        })
    }
}

/// The semaphore and the reader-writer lock on one backend (see
/// [`kinds`]), each in rounds with the contention scenario's work, or left
/// out where the backend's capabilities do not grant it.
async fn kind_runs(args: &Args, exe: &std::path::Path, target: &Target) -> Outcome<Vec<KindRun>> {
    let (processes, tasks) = (args.processes, args.tasks);
    let workload = Workload::Rounds { work: args.work };
    let capabilities = target.backend.capabilities();
    let mut runs = Vec::new();
    for mix in kinds::MEASURED {
        if let Some(claim) = mix.refused_by(&capabilities) {
            eprintln!("   {}: left out, {claim} is not granted", mix.label());
            runs.push(KindRun {
                mix,
                outcome: KindOutcome::LeftOut(claim),
            });
            continue;
        }
        say(
            &format!(
                "{} ({}): {processes} processes x {tasks} tasks",
                mix.label(),
                workload.label()
            ),
            args.seconds,
        );
        let window = Window::after(RUST_STARTUP, args.seconds);
        let layout = Layout {
            processes,
            tasks,
            window,
            workload,
        };
        let workers = our_workers(exe, target, &bench_name(mix.slug()), layout, mix);
        let gathered = gather::gather(target, workers, window, workload.rounds()).await?;
        runs.push(KindRun {
            mix,
            outcome: KindOutcome::Measured(Box::new(KindSummary::new(
                gathered,
                mix,
                window.length(),
            ))),
        });
    }
    Ok(runs)
}
