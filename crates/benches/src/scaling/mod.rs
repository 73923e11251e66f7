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
use crate::url_kind::OBJECT_STORE;

/// The most locks an object store is asked to hold: each is extended by a
/// request of its own every third of the lease, so 1,000 held locks ask
/// for 100 requests a second, and 10,000 for 1,000 (see the report's
/// held-locks part).
pub(crate) const OBJECT_STORE_HELD_AT_MOST: usize = 1_000;

/// The most names an object store is asked to take: it keeps each name's
/// object, and Azurite writes the metadata of every object it keeps to its
/// index every 5 s, so each name makes the next slower (see the report's
/// names part).
pub(crate) const OBJECT_STORE_NAMES_AT_MOST: usize = 10_000;

use self::held::HoldMany;
use self::names::NamesPoint;
use self::waiters::WaitersPoint;

/// The curves measured on one backend; a curve not measured there is
/// empty.
#[derive(Debug, Default)]
pub(crate) struct Curves {
    pub(crate) waiters: Curve<WaitersPoint>,
    pub(crate) names: Curve<NamesPoint>,
    /// The names points left out on this backend (see
    /// [`Plan::names_at_most`]).
    pub(crate) names_left_out: Vec<usize>,
    pub(crate) held: Curve<HoldMany>,
    /// The held-locks points left out on this backend (see
    /// [`Plan::held_at_most`]).
    pub(crate) held_left_out: Vec<usize>,
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
    /// The most locks this backend is asked to hold, where holding more
    /// would only measure a server past its capacity: on an object store,
    /// each lock held is a request of its own every extension cadence.
    pub(crate) held_at_most: Option<usize>,
    /// The most names this backend is asked to take, where more would
    /// take longer than a run can give: on an object store whose emulator
    /// slows with every object it keeps.
    pub(crate) names_at_most: Option<usize>,
}

impl Plan {
    /// The curves of `target`: none on a scale-out form (`full` false),
    /// whose cost per server section 5 shows; only the waiters on a fair
    /// form, which orders waiters and changes nothing else; no held locks
    /// in PostgreSQL's advisory mode, where each is a server connection;
    /// on an object store, at most [`OBJECT_STORE_NAMES_AT_MOST`] names and
    /// [`OBJECT_STORE_HELD_AT_MOST`] locks held.
    pub(crate) fn of(target: &Target, full: bool) -> Self {
        let ordinary = full && !target.fair();
        let object_store = target.kind() == OBJECT_STORE;
        Self {
            waiters: full,
            names: ordinary,
            held: ordinary && !target.advisory_mode(),
            held_at_most: object_store.then_some(OBJECT_STORE_HELD_AT_MOST),
            names_at_most: object_store.then_some(OBJECT_STORE_NAMES_AT_MOST),
        }
    }
}

/// The points of `points` at most `at_most`, which a curve measures, and
/// those above it, which it leaves out.
pub(crate) fn within(points: &[usize], at_most: Option<usize>) -> (Vec<usize>, Vec<usize>) {
    points
        .iter()
        .partition(|&&n| at_most.is_none_or(|most| n <= most))
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
            let (points, left_out) = within(&args.names, plan.names_at_most);
            if !left_out.is_empty() {
                eprintln!("   names: {left_out:?} left out");
            }
            curves.names_left_out = left_out;
            curves.names = curve("names", &points, |n| names::names(target, n)).await;
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
            let (points, left_out) = within(&args.held, plan.held_at_most);
            if !left_out.is_empty() {
                eprintln!("   locks held: {left_out:?} left out");
            }
            curves.held_left_out = left_out;
            curves.held = curve("locks held", &points, |n| {
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

    #[test]
    fn points_above_a_limit_are_left_out() {
        let (kept, left_out) = within(&[100, 1_000, 10_000, 100_000], Some(1_000));
        assert_eq!((kept, left_out), (vec![100, 1_000], vec![10_000, 100_000]));
        let (kept, left_out) = within(&[100_000], None);
        assert_eq!((kept, left_out), (vec![100_000], vec![]));
    }

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
