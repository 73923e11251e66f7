//! Exclusion: of a lock's validities, which began while another that it
//! excludes was still valid. Validities are intervals on the history's one
//! clock, so this is a sweep, not a search.

use std::collections::BTreeMap;
use std::fmt;

use crate::history::{Call, History, Op, Share};

/// A validity that began while one it excludes was still valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The lock.
    pub name: String,
    /// The validity it overlapped: the one valid longest after `later`
    /// began, of those it excludes.
    pub earlier: Op,
    /// The validity that began too soon.
    pub later: Op,
}

impl Overlap {
    /// How long both were valid, in nanoseconds.
    pub fn length_ns(&self) -> u64 {
        let end = |op: &Op| op.complete_ns.unwrap_or(op.invoke_ns);
        end(&self.earlier)
            .min(end(&self.later))
            .saturating_sub(self.later.invoke_ns)
    }

    /// The earlier validity's fencing token.
    pub fn earlier_token(&self) -> u64 {
        token(&self.earlier)
    }

    /// The later validity's fencing token.
    pub fn later_token(&self) -> u64 {
        token(&self.later)
    }

    /// When the overlap began: when the later validity did.
    pub fn began_ns(&self) -> u64 {
        self.later.invoke_ns
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "lock {:?}: two leases it excludes from each other were valid together for \
             {:.6} ms:",
            self.name,
            self.length_ns() as f64 / 1e6
        )?;
        writeln!(f, "    {}", self.earlier)?;
        write!(f, "    {}", self.later)
    }
}

/// What the sweep found on every lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Exclusion {
    pub(crate) overlaps: Vec<Overlap>,
    /// Validities checked.
    pub(crate) validities: usize,
    /// The most validities of one lock seen at once.
    pub(crate) most_at_once: usize,
}

/// One validity, as the sweep sees it.
#[derive(Clone, Copy)]
struct Validity<'a> {
    op: &'a Op,
    share: Share,
    from: u64,
    until: u64,
}

/// Sweeps each lock's validities in the order they began. One that begins
/// while another it excludes is valid overlaps it: any other validity, for
/// an exclusive one; a writer's, for a reader's; `limit` others, for a
/// permit. Validities that meet (one ends at the instant the next begins)
/// do not overlap.
pub(crate) fn check(history: &History) -> Exclusion {
    let mut locks: BTreeMap<&str, Vec<Validity<'_>>> = BTreeMap::new();
    for op in history.ops() {
        // `History` refuses a validity without its end.
        if let (Call::Held { name, share, .. }, Some(until)) = (&op.call, op.complete_ns) {
            locks.entry(name).or_default().push(Validity {
                op,
                share: *share,
                from: op.invoke_ns,
                until,
            });
        }
    }
    let mut found = Exclusion::default();
    for (name, mut validities) in locks {
        found.validities += validities.len();
        validities.sort_by_key(|validity| (validity.from, validity.until));
        let mut valid: Vec<Validity<'_>> = Vec::new();
        for validity in validities {
            valid.retain(|other| other.until > validity.from);
            let crowded = match validity.share {
                Share::Permit { limit } => valid.len() >= limit as usize,
                _ => false,
            };
            // The one valid longest among those it clashes with.
            let earlier = valid
                .iter()
                .filter(|other| crowded || excludes(other.share, validity.share))
                .max_by_key(|other| other.until);
            if let Some(earlier) = earlier {
                found.overlaps.push(Overlap {
                    name: name.to_owned(),
                    earlier: earlier.op.clone(),
                    later: validity.op.clone(),
                });
            }
            valid.push(validity);
            found.most_at_once = found.most_at_once.max(valid.len());
        }
    }
    found
}

/// Whether a validity held as `held` excludes one held as `other` beside
/// it, whatever the count: permits exclude one another only past their
/// limit, which the sweep counts.
fn excludes(held: Share, other: Share) -> bool {
    !matches!(
        (held, other),
        (Share::Shared, Share::Shared) | (Share::Permit { .. }, Share::Permit { .. })
    )
}

fn token(op: &Op) -> u64 {
    match op.call {
        Call::Held { token, .. } => token,
        _ => 0,
    }
}
