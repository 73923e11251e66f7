//! How cost grows with the work: three curves per backend, each measured
//! at the points the command line gives.
//!
//! - [`waiters`]: N processes waiting on one name; per release, the server
//!   commands until the next grant, and the hand-off time.
//! - [`names`]: N distinct names, each taken once; cycles per second, and
//!   what the store keeps afterwards ([`store`]).
//! - [`held`]: N locks held by one process; the extension traffic and the
//!   keeper's CPU.
//!
//! A point that fails is kept with its error, so that one overloaded point
//! (100,000 watches on one etcd member, say) does not end the whole run.

pub(crate) mod held;
pub(crate) mod names;
pub(crate) mod store;
pub(crate) mod taking;
pub(crate) mod waiters;

use std::future::Future;
use std::path::Path;

use crate::cli::Args;
use crate::outcome::Outcome;
use crate::target::Target;

use self::held::HoldMany;
use self::names::NamesPoint;
use self::waiters::WaitersPoint;

/// The curves measured on one backend; a curve not measured there is
/// empty.
#[derive(Debug, Default)]
pub(crate) struct Curves {
    pub(crate) waiters: Curve<WaitersPoint>,
    pub(crate) names: Curve<NamesPoint>,
    pub(crate) held: Curve<HoldMany>,
}

impl Curves {
    /// Whether any point of any curve was measured.
    pub(crate) fn measured_any(&self) -> bool {
        measured(&self.waiters).next().is_some()
            || measured(&self.names).next().is_some()
            || measured(&self.held).next().is_some()
    }
}

/// Which curves a backend takes part in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) waiters: bool,
    pub(crate) names: bool,
    pub(crate) held: bool,
}

impl Plan {
    /// The curves of `target`: none on a scale-out form (`full` false),
    /// whose cost per server section 5 shows; only the waiters on a fair
    /// form, which orders waiters and changes nothing else; no held locks
    /// in PostgreSQL's advisory mode, where each is a server connection.
    pub(crate) fn of(target: &Target, full: bool) -> Self {
        let ordinary = full && !target.fair();
        Self {
            waiters: full,
            names: ordinary,
            held: ordinary && !target.advisory_mode(),
        }
    }
}

/// Measures every curve of every target its plan names: the waiters on
/// every target first, then the names, then the held locks, the heaviest
/// work last, so that a server's background work after it (SecantusDB's
/// TTL monitor, say) disturbs nothing else.
pub(crate) async fn measure(args: &Args, exe: &Path, targets: &[(&Target, Plan)]) -> Vec<Curves> {
    let mut all: Vec<Curves> = targets.iter().map(|_| Curves::default()).collect();
    for ((target, plan), curves) in targets.iter().zip(&mut all) {
        if plan.waiters {
            eprintln!("== {} ({}): waiters", target.shown, target.label());
            curves.waiters = curve("waiters", &args.waiters, |n| {
                waiters::waiters(exe, target, n, args.waiters_seconds)
            })
            .await;
        }
    }
    for ((target, plan), curves) in targets.iter().zip(&mut all) {
        if plan.names {
            eprintln!("== {} ({}): names", target.shown, target.label());
            curves.names = curve("names", &args.names, |n| names::names(target, n)).await;
        }
    }
    for ((target, plan), curves) in targets.iter().zip(&mut all) {
        if plan.held {
            eprintln!(
                "== {} ({}): locks held for {}",
                target.shown,
                target.label(),
                humantime::format_duration(args.held_seconds)
            );
            curves.held = curve("locks held", &args.held, |n| {
                held::hold_many(
                    target,
                    n,
                    args.held_seconds,
                    args.held_lease,
                    args.held_take_within,
                )
            })
            .await;
        }
    }
    all
}

/// One point of a curve: the size of the work, and what it measured.
#[derive(Debug)]
pub(crate) struct Point<T> {
    /// Waiters, names or locks held.
    pub(crate) at: usize,
    pub(crate) measured: Outcome<T>,
}

/// One curve of one backend, its points in the order given.
pub(crate) type Curve<T> = Vec<Point<T>>;

/// Measures `measure` at every point of `points` in turn, saying each on
/// the terminal; a failed point keeps its error and the curve goes on.
pub(crate) async fn curve<T, F, Fut>(what: &str, points: &[usize], mut measure: F) -> Curve<T>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Outcome<T>>,
{
    let mut curve = Vec::with_capacity(points.len());
    for &at in points {
        eprintln!("   {what}: {at}");
        let measured = measure(at).await;
        if let Err(error) = &measured {
            eprintln!("   {what}: {at}: failed: {error}");
        }
        curve.push(Point { at, measured });
    }
    curve
}

/// The measured points of `curve`, with their sizes.
pub(crate) fn measured<T>(curve: &[Point<T>]) -> impl Iterator<Item = (usize, &T)> {
    curve
        .iter()
        .filter_map(|point| Some((point.at, point.measured.as_ref().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_point_is_kept_and_the_curve_goes_on() {
        let curve = curve("test", &[1, 2, 3], |at| async move {
            if at == 2 {
                Err("too many".to_owned())
            } else {
                Ok(at * 10)
            }
        })
        .await;
        assert_eq!(curve.len(), 3);
        assert_eq!(curve[1].measured.as_ref().unwrap_err(), "too many");
        let good: Vec<_> = measured(&curve).map(|(at, v)| (at, *v)).collect();
        assert_eq!(good, [(1, 10), (3, 30)]);
    }
}
