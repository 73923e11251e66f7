//! The report's header: the machine, the versions, the exact command and
//! the settings of the run, and the settings each section's stamp names.

use std::fmt::Write;
use std::time::Duration;

use super::*;
use crate::stamp;

impl Run {
    pub(super) fn header(&self, out: &mut String) {
        let s = &self.settings;
        let _ = writeln!(out, "- Machine: {}", stamp::machine());
        let mut versions = vec![format!("distlock {}", env!("CARGO_PKG_VERSION")), rustc()];
        versions.extend(self.notes.iter().cloned());
        for b in &self.backends {
            if let Some(version) = &b.server_version {
                let line = match b.kind {
                    "MongoDB" => format!("MongoDB server: `buildInfo` reports {version}"),
                    kind => format!("{kind} {version}"),
                };
                // Both PostgreSQL modes report the one server.
                if !versions.contains(&line) {
                    versions.push(line);
                }
            }
        }
        if self.backend("MongoDB").is_some() {
            versions.push(format!("{PEER} (crates.io, pinned `=0.2.0`)"));
        }
        if self.backend("Redis").is_some() {
            versions.push(redis::VERSIONS.to_owned());
        }
        if let Some(v) = &self.tooz_versions {
            versions.push(format!(
                "tooz {} with pymemcache {} on Python {}",
                v.tooz, v.pymemcache, v.python
            ));
        }
        let _ = writeln!(out, "- Versions: {}", versions.join("; "));
        let _ = writeln!(out, "- Command: `{}`", self.command);
        self.durability_lines(out);
        for line in &self.left_out {
            let _ = writeln!(out, "- Left out: {line}");
        }
        let _ = writeln!(
            out,
            "- Backends (servers started by the script on loopback): {}",
            self.backends
                .iter()
                .map(|b| format!("{} `{}`", b.label, b.url))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let single_task = if s.single_task_processes > 0 {
            format!(
                ", then in rounds on {} processes of one task each",
                s.single_task_processes
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "- Settings: the uncontended scenario runs {} per backend, shared by its \
             contenders; each contended run lasts {}, with {} tasks in each of {} \
             processes{single_task}; section 4's curves are described there.\n",
            humantime::format_duration(s.uncontended_seconds),
            humantime::format_duration(s.seconds),
            s.tasks,
            s.processes
        );
        let _ = writeln!(out, "## How server commands are counted\n");
        let _ = writeln!(
            out,
            "- **MongoDB**: the driver's command monitoring. Every `mongodb::Client` the \
             benchmarks build, in the parent and in every worker process, ours and \
             {PEER}'s, carries a `CommandEventHandler` that counts each \
             `CommandStartedEvent` by command name; each worker reads its counts when the \
             contention window opens and when it closes, so that what it sends before \
             (connecting, opening its change stream) and after (ending the waits the \
             close cut short) is not counted, as where the server counts; it prints them \
             as a final JSON line, and the parent adds them up. This \
             includes the change stream's `getMore`s. The driver's own server monitoring \
             (`hello` heartbeats) is not reported to command monitoring and is not \
             counted. As a cross-check, the contention table also gives the server's own \
             count: the delta of SecantusDB's `serverStatus` opcounters (`insert + query + \
             update + delete + getmore + command`, less the `serverStatus` that read it) \
             over the same window. The server's count also includes the `hello` handshake \
             of every new connection (a worker's pool opens one per task that needs it), \
             which command monitoring does not report, so it can be a little higher."
        );
        let _ = writeln!(
            out,
            "- **memcached**: deltas of the server's `stats` (read by the parent when the \
             window opens and when it closes), summed over {}. A CAS store counts in \
             `cmd_set` and again in `cas_*`, so `cas_*` is left out. memcached 1.6 does \
             not count an `ma` that creates a missing counter (once per lock name) nor \
             `mn`/`stats`. For memcached over several servers (quorum mode), the \
             counters are summed over all of them.\n",
            MEMCACHED_COMMANDS
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(" + ")
        );
        if self.backend("etcd").is_some() {
            let _ = writeln!(out, "{}\n", etcd::COUNTING);
        }
        if self
            .backends
            .iter()
            .any(|b| matches!(b.scale_out, Some(ScaleOut::EtcdCluster { .. })))
        {
            let _ = writeln!(out, "{}\n", etcd::CLUSTER_COUNTING);
        }
        if self.backend("PostgreSQL").is_some() || self.advisory_mode().is_some() {
            let _ = writeln!(out, "{}\n", postgres::COUNTING);
        }
        if self.backend("Redis").is_some() {
            let _ = writeln!(out, "{}\n", redis::COUNTING);
        }
        if self.backend(crate::url_kind::OBJECT_STORE).is_some() {
            let _ = writeln!(out, "{}\n", objectstore::COUNTING);
        }
    }

    /// The settings the section headed `heading` used, in words, for its
    /// stamp; all of the run's for a section this does not know.
    pub(super) fn settings_of(&self, heading: &str) -> String {
        let s = &self.settings;
        let uncontended = format!(
            "the uncontended scenario ran {} per backend",
            humantime::format_duration(s.uncontended_seconds)
        );
        let mut contended = format!(
            "each contended run lasted {}, with {} tasks in each of {} processes",
            humantime::format_duration(s.seconds),
            s.tasks,
            s.processes
        );
        if !s.work.is_zero() {
            let _ = write!(
                contended,
                ", each holding for {} in rounds with work",
                humantime::format_duration(s.work)
            );
        }
        // The semaphores, the reader-writer locks and the scale-out forms
        // run the first layout only.
        let first_layout = contended.clone();
        if s.single_task_processes > 0 {
            let _ = write!(
                contended,
                ", then rounds on {} processes of one task each",
                s.single_task_processes
            );
        }
        let held = self
            .backends
            .iter()
            .find_map(|b| b.held_goal_point())
            .map(|m| {
                format!(
                    "each point of held locks (among them {}) held for {} on a {} lease",
                    m.locks,
                    humantime::format_duration(m.held_for),
                    humantime::format_duration(m.lease)
                )
            });
        let heading = heading.to_lowercase();
        let parts = if heading.contains("uncontended") {
            vec![uncontended]
        } else if heading.contains("contention") {
            vec![contended]
        } else if heading.contains("semaphore") {
            vec![first_layout]
        } else if heading.contains("how cost grows") {
            std::iter::once("each curve's points as its table gives them".to_owned())
                .chain(held.clone())
                .collect()
        } else if heading.contains("scale-out") {
            vec![uncontended, first_layout]
        } else {
            [uncontended, contended].into_iter().chain(held).collect()
        };
        parts.join("; ")
    }

    /// How long each backend's uncontended scenario waited for quiet.
    pub(super) fn quiet_waits(&self) -> String {
        let waits: Vec<String> = self
            .backends
            .iter()
            .filter_map(|b| {
                let quiet = b.uncontended.quiet?;
                let waited = Duration::from_millis(quiet.waited.as_millis() as u64);
                Some(match quiet.busy {
                    Some(busy) => format!(
                        "{} waited {} (then {:.0} % busy)",
                        b.label,
                        humantime::format_duration(waited),
                        busy * 100.0
                    ),
                    None => format!("{} could not tell", b.label),
                })
            })
            .collect();
        if waits.is_empty() {
            String::new()
        } else {
            format!(": {}", waits.join(", "))
        }
    }
}

fn rustc() -> String {
    std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "rustc (unknown)".into(), |v| v.trim().to_owned())
}
