//! The story the parent tells: the instances agree on a leader, the
//! leader is killed, and the others agree on a new one with a greater
//! term, whose job carries on.

use std::path::Path;
use std::time::{Duration, Instant};

use distlock::file::fencing::FencedFile;

use crate::instances::Instance;
use crate::job::last_tick;
use crate::wire::{Led, Tick};
use crate::{BoxError, INSTANCES};

/// How often the parent asks the instances who leads.
const ASK_EVERY: Duration = Duration::from_millis(50);

/// How many ticks the first leader's job runs before it is killed, so
/// that the report shows it running.
const TICKS_BEFORE_THE_KILL: u64 = 3;

/// What the parent watches the instances with.
pub(crate) struct Watch<'a> {
    pub(crate) http: reqwest::Client,
    pub(crate) job_file: &'a Path,
    pub(crate) lease: Duration,
}

impl Watch<'_> {
    /// How long each step may take: three leases, generous, since one is
    /// the longest a takeover should take.
    fn bound(&self) -> Duration {
        self.lease * 3
    }

    /// Waits until the instances agree on a leader, kills it, and reports
    /// the takeover. `false`, after saying why, if a step did not happen
    /// within three leases or the killed leader's term was let through.
    ///
    /// # Errors
    /// An instance that cannot be killed, a leader that is none of the
    /// instances, or an I/O error of the job's file.
    pub(crate) async fn kill_the_leader(
        &self,
        instances: &mut Vec<Instance>,
    ) -> Result<bool, BoxError> {
        let bound = self.bound();
        let Some(first) = self.agreement(instances, None).await? else {
            println!("the instances did not agree on a leader within {bound:?}");
            return Ok(false);
        };
        let leader = number_of(instances, &first)?;
        println!(
            "all {INSTANCES} agree (GET /leader): instance {leader} ({}) leads, term {}",
            first.value, first.term
        );
        if !self.all_healthy(instances).await? {
            return Ok(false);
        }
        let Some(tick) = self.job_in(first.term, TICKS_BEFORE_THE_KILL).await? else {
            println!("the leader's job did not run {TICKS_BEFORE_THE_KILL} ticks within {bound:?}");
            return Ok(false);
        };
        println!(
            "the job runs on instance {}: tick {} of term {} in {}",
            tick.instance,
            tick.tick,
            tick.term,
            self.job_file.display()
        );

        let at = instances
            .iter()
            .position(|instance| instance.number == leader)
            .ok_or("the leader is not among the instances")?;
        let killed = instances.remove(at);
        let pid = killed
            .pid()
            .map_or("gone".to_owned(), |pid| pid.to_string());
        let killed_at = Instant::now();
        killed.kill().await?;
        println!(
            "killed instance {leader} (pid {pid}), the leader, with SIGKILL: it could not resign"
        );

        let Some(next) = self.agreement(instances, Some(first.term)).await? else {
            println!(
                "no takeover: the other {} did not agree on a leader with a term above {} \
                 within {bound:?} (three leases)",
                instances.len(),
                first.term
            );
            return Ok(false);
        };
        let took = killed_at.elapsed();
        let successor = number_of(instances, &next)?;
        println!(
            "takeover: term {} -> term {}, instance {leader} -> instance {successor}, {:.2} s \
             after the kill: {:.2} of the {:?} lease",
            first.term,
            next.term,
            took.as_secs_f64(),
            took.as_secs_f64() / self.lease.as_secs_f64(),
            self.lease
        );
        let Some(tick) = self.job_in(next.term, 1).await? else {
            println!(
                "the job did not resume in term {} within {bound:?}",
                next.term
            );
            return Ok(false);
        };
        println!(
            "the job resumed on instance {}: tick {} of term {}",
            tick.instance, tick.tick, tick.term
        );
        // What the term is for: a tick the killed leader had in flight
        // would come with its old term, and the job's fence turns it away.
        let late = FencedFile::new(self.job_file).write(first.term, b"{}")?;
        println!(
            "a late tick of term {}: {}",
            first.term,
            if late {
                "WRITTEN: the fence let a stale term through"
            } else {
                "turned away by the job's fence"
            }
        );
        Ok(!late)
    }

    /// Asks every instance's `GET /healthz`, and says whether all answered
    /// 200, after printing what each unhealthy one said.
    async fn all_healthy(&self, instances: &[Instance]) -> Result<bool, BoxError> {
        let mut healthy = 0;
        for instance in instances {
            let (status, said) = instance.health(&self.http).await?;
            if status == 200 {
                healthy += 1;
            } else {
                println!(
                    "  instance {} is unhealthy ({status}): {said}",
                    instance.number
                );
            }
        }
        println!(
            "{healthy} of {} healthy (GET /healthz: the leader's leadership is confirmed)",
            instances.len()
        );
        Ok(healthy == instances.len())
    }

    /// Asks every instance who leads until all name the same leader, with
    /// a term above `after` if given; `None` if they have not within three
    /// leases, after printing what each said last.
    async fn agreement(
        &self,
        instances: &[Instance],
        after: Option<u64>,
    ) -> Result<Option<Led>, BoxError> {
        let deadline = Instant::now() + self.bound();
        loop {
            let mut said = Vec::with_capacity(instances.len());
            for instance in instances {
                said.push(match instance.ask(&self.http).await {
                    Ok(answer) => Ok(answer.leader),
                    Err(error) => Err(error.to_string()),
                });
            }
            if let Some(Ok(Some(led))) = said.first()
                && said.iter().all(|other| {
                    // The time left differs from one look to the next.
                    matches!(other, Ok(Some(o)) if (&o.value, o.term) == (&led.value, led.term))
                })
                && after.is_none_or(|term| led.term > term)
            {
                return Ok(Some(led.clone()));
            }
            if Instant::now() >= deadline {
                for (instance, said) in instances.iter().zip(said) {
                    println!("  instance {} said: {said:?}", instance.number);
                }
                return Ok(None);
            }
            tokio::time::sleep(ASK_EVERY).await;
        }
    }

    /// Waits until the job's file shows tick `ticks` or later of `term`;
    /// `None` if it has not within three leases.
    async fn job_in(&self, term: u64, ticks: u64) -> Result<Option<Tick>, BoxError> {
        let deadline = Instant::now() + self.bound();
        loop {
            if let Some(tick) = last_tick(self.job_file)?
                && tick.term == term
                && tick.tick >= ticks
            {
                return Ok(Some(tick));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(ASK_EVERY).await;
        }
    }
}

/// The instance whose base URL `led` campaigned with.
fn number_of(instances: &[Instance], led: &Led) -> Result<u64, BoxError> {
    instances
        .iter()
        .find(|instance| instance.base == led.value)
        .map(|instance| instance.number)
        .ok_or_else(|| {
            format!(
                "`{}` leads, which is none of this run's instances",
                led.value
            )
            .into()
        })
}
