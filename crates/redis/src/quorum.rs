//! Quorum mode: every lock on each of N ≥ 3 independent servers, each
//! judging by its own clock with the same scripts as single mode. A grant
//! counts while a majority holds it:
//!
//! - **Acquire** asks every server at once, and is decided as soon as the
//!   answers in decide it. It is granted when a majority granted within
//!   the lease, less the time the attempt took and a drift margin (every
//!   copy was stored after the attempt began, so each lives at least that
//!   long). Otherwise every copy it made is deleted again. A server that
//!   came back empty less than a lease ago abstains: its grant counts only
//!   when every server granted (see [`counted`]).
//! - **Tokens.** Each server issues its own token for the name; the
//!   grant's is the largest of its majority's, and before the grant is
//!   returned the counters of that majority are raised to it (and their
//!   copies carry it). A later majority shares a server with this one,
//!   whose counter is already past it (see docs/redis.md for what this
//!   rests on).
//! - **Extend** succeeds on a majority, fails (the lease is gone) when too
//!   many refuse for a majority to remain, and is an error otherwise.
//! - **Mending.** Once a majority has extended a lease, the servers that
//!   refused it get its copy back (see below).
//! - **Release** goes to every server, decided as an attempt is.
//!
//! # Mending a copy that a server lost
//!
//! A server that restarts without persistence forgets its copies. Left at
//! that, a lock held on three servers keeps two copies after one restart
//! and one after a second, even a lease apart: the holder loses it at its
//! next extension. So when a majority has extended a lease (each checked
//! that the copy is the lease's own), every server that refused it is
//! sent the mend script (`MEND` in the scripts), which re-creates the
//! copy only where nothing holds the name: `SET … NX` for a writer, and
//! for a reader only where no writer, and no holder of another kind,
//! holds it. Why that is safe:
//!
//! - **Only a valid lease is mended.** The mend follows an extension that
//!   a majority confirmed, in the same call, and never one that was
//!   refused or left in doubt: the copy it makes is of a grant that holds
//!   a majority at that moment. It decides nothing: the extension's
//!   verdict counts the copies that were extended, not the ones mended
//!   after it; a mended copy counts from the next extension on, as any
//!   copy does.
//! - **Never over another's grant.** A server where anything holds the
//!   name (another client's grant, a copy of one being rolled back, a
//!   writer against a reader or readers against a writer) is left as it
//!   is, so a grant another client made there is never overwritten or
//!   hidden: it is decided by its own majority, as before. Only a server
//!   that answered "not ours" is asked, and the script looks again
//!   itself, in one step, so nothing comes between its look and its write.
//! - **The abstention still holds.** A server that came back empty less
//!   than a lease ago abstains from grants ([`counted`]). A mended copy is
//!   no vote for a grant: it is a copy of one decided elsewhere, and the
//!   mend leaves the server's epoch alone, so it neither starts nor ends
//!   the abstention (the first attempt after the restart starts it, as
//!   before). All a mended copy does to other clients is make the server
//!   answer "held", which takes a vote from their attempts, never gives
//!   one. The case the abstention exists for, a holder left with one copy
//!   of three, is a case of an extension that no majority confirms: no
//!   mend, and the holder loses the lock at that extension, as before.
//!   Mending made during the abstention is fine: it restores the copy the
//!   abstention stands in for.
//! - **What it changes.** Restarts one at a time, each far enough from
//!   the last for an extension to pass between them (a third of the lease
//!   by default), no longer wear a lock away: after each one the lock is
//!   on every server again. Copies lost on a majority of the servers
//!   between two extensions are not mended: that extension is refused,
//!   and the lock is lost, as before.
//! - **Tokens.** The mended copy carries the lease's own token, decided
//!   (no `~`), and the script raises the name's counter on that server to
//!   it if the server has less (a restart loses the counter too), as the
//!   grant raised its majority's. So a later grant whose majority shares
//!   with this one's only servers that were restarted and mended still
//!   meets a counter at this token or past it, and issues more; a raise
//!   never lowers a counter, so no later grant can get less than an
//!   earlier one from it.
//! - **A late mend.** The mend is awaited within the extension, and core
//!   waits for an extension in flight before it releases, so a release
//!   comes after the copies it must end. A mend whose answer was lost may
//!   still land after the release: that copy then lasts its lease on one
//!   server, a minority, as a roll-back that never arrived would.
//!
//! Semaphores are not offered: each server counts only the permits it
//! holds, and permits held by different majorities could together exceed
//! the limit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use distlock_core::backend::{AcquireRequest, GrantState, Lease};
use distlock_core::{Claim, Error, LockInfo, LockName, Result};
use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;

use crate::keys::Record;
use crate::node::{Node, WriterMark};
use crate::reply::{Answer, Listed, ListedWait};

/// The servers of one backend in quorum mode.
pub(crate) struct Quorum<'a> {
    nodes: &'a [Node],
    need: usize,
}

impl<'a> Quorum<'a> {
    pub(crate) fn new(nodes: &'a [Node], need: usize) -> Self {
        Self { nodes, need }
    }

    /// One attempt on every server: granted by a majority in time, or
    /// held (every partial grant deleted again).
    pub(crate) async fn acquire(
        &self,
        request: &AcquireRequest,
        mark: Option<&WriterMark>,
    ) -> Result<Answer> {
        let timeout = call_timeout(request.operation_timeout, request.lease);
        let started = Instant::now();
        let (n, need) = (self.nodes.len(), self.need);
        // Decided once a majority granted, or too many did not for one to
        // remain: a server that is slow or away holds nobody up.
        let calls = self.nodes.iter().map(|node| {
            let (node, request, mark) = (node.clone(), request.clone(), mark.cloned());
            async move { node.acquire(&request, mark.as_ref(), true, timeout).await }
        });
        let answers = gather(calls, |answers: &[Option<Result<Answer>>]| {
            let (mut granted, mut abstained, mut answered) = (0, 0, 0);
            for answer in answers.iter().flatten() {
                answered += 1;
                match answer {
                    Ok(Answer::Granted(_)) => granted += 1,
                    Ok(Answer::Abstained { .. }) => {
                        (granted, abstained) = (granted + 1, abstained + 1)
                    }
                    _ => {}
                }
            }
            let counted = counted(n, granted, abstained);
            // The most that can still count: every server, while all that
            // answered granted; otherwise the grants that count, and a
            // grant from each server yet to answer.
            let best = if granted == answered {
                n
            } else {
                granted - abstained + (n - answered)
            };
            counted >= need || best < need
        })
        .await;
        let Tally {
            granted,
            abstained,
            in_doubt,
            errors,
            left,
            marked,
            conflict,
        } = Tally::of(answers);
        let in_time = || started.elapsed() + drift(request.lease) < request.lease;
        let counted = counted(n, granted.len(), abstained);

        if counted >= self.need && in_time() {
            let token = granted.iter().map(|(_, token)| *token).max().unwrap_or(0);
            let agreed = self.raise_counters(request, &granted, token, timeout).await;
            if agreed >= self.need && in_time() {
                if !errors.is_empty() {
                    tracing::warn!(
                        name = %request.name,
                        granted = granted.len(),
                        servers = self.nodes.len(),
                        error = %combined(errors),
                        "acquired on a majority; some redis servers did not answer"
                    );
                }
                return Ok(Answer::Granted(token));
            }
            self.roll_back(request, &granted, &in_doubt).await;
            return Err(Error::Backend {
                backend: "redis",
                message: format!(
                    "acquiring {}: could not raise the fencing counters of a majority of \
                     servers to {token} within the lease of {:?}",
                    request.name, request.lease
                ),
                source: None,
            });
        }

        // A split vote: this attempt may have taken some servers, but not
        // a majority. Contenders woken by one release ask together, and
        // the rollbacks' announcements bring them back together, to split
        // again; so a waiting attempt that split pauses, by a random time
        // of its own, before it asks again (see `Waiting`).
        let split = request.retries
            && counted < need
            && !(granted.is_empty() && in_doubt.is_empty())
            && errors.len() <= n - need
            && conflict.is_none();
        self.roll_back(request, &granted, &in_doubt).await;
        if errors.len() > n - need {
            return Err(combined(errors));
        }
        if counted >= need {
            return Err(too_slow("acquiring", request, started.elapsed()));
        }
        if let Some(held) = conflict {
            return Ok(Answer::Conflict(held));
        }
        if split {
            return Ok(Answer::Split {
                took: started.elapsed(),
                marked,
            });
        }
        Ok(Answer::Held { left, marked })
    }

    /// Raises the counters of the granting servers to `token`, and writes
    /// it into their copies, decided: how many of them have their counter
    /// at `token` after. Servers that issued `token` are asked too, so
    /// that their copies read as decided; their counters are there already.
    async fn raise_counters(
        &self,
        request: &AcquireRequest,
        granted: &[(usize, u64)],
        token: u64,
        timeout: Duration,
    ) -> usize {
        let raised = join_all(granted.iter().map(|&(index, _)| {
            self.nodes[index].raise(
                &request.name,
                request.claim,
                request.lease_id,
                token,
                timeout,
            )
        }))
        .await;
        granted
            .iter()
            .zip(&raised)
            .filter(|((_, issued), raised)| *issued == token || raised.is_ok())
            .count()
    }

    /// Deletes the copies of a grant that did not make a majority: at once
    /// on the servers that granted, and in the background on those whose
    /// answer was lost or not awaited (which may have stored it, or may
    /// yet), so that a server that hangs does not hold the caller up.
    async fn roll_back(
        &self,
        request: &AcquireRequest,
        granted: &[(usize, u64)],
        in_doubt: &[usize],
    ) {
        // With time of its own: the attempt's may be used up.
        let patience = call_timeout(request.operation_timeout, request.lease);
        let (name, claim, id) = (&request.name, request.claim, request.lease_id);
        let outcomes = join_all(
            granted
                .iter()
                .map(|(index, _)| self.nodes[*index].release(name, claim, id, patience)),
        )
        .await;
        for error in outcomes.into_iter().filter_map(Result::err) {
            tracing::debug!(%error, "could not roll back a partial grant; it will expire");
        }
        if in_doubt.is_empty() {
            return;
        }
        let doubtful: Vec<Node> = in_doubt.iter().map(|&i| self.nodes[i].clone()).collect();
        let name = name.clone();
        tokio::spawn(async move {
            for round in 0..2 {
                if round == 1 {
                    // A script sent before the connection broke may land
                    // after the first look.
                    tokio::time::sleep(patience).await;
                }
                for node in &doubtful {
                    if let Err(error) = node.release(&name, claim, id, patience).await {
                        tracing::debug!(%error, "could not roll back a grant whose answer was lost; it will expire");
                    }
                }
            }
        });
    }

    /// Extends each lease on every server: extended on a majority, refused
    /// by too many for a majority to remain, or an error. A lease a
    /// majority extended gets its copy back on the servers that refused
    /// it, where nothing holds the name (see [`mend`](Self::mend)).
    pub(crate) async fn extend_many(
        &self,
        leases: &[Lease],
        timeout: Duration,
    ) -> Vec<Result<bool>> {
        let mut by_node: Vec<std::vec::IntoIter<Result<bool>>> = join_all(
            self.nodes
                .iter()
                .map(|node| node.extend_many(leases, timeout)),
        )
        .await
        .into_iter()
        .map(|extended| extended.outcomes.into_iter())
        .collect();
        // For each server, the leases to mend there.
        let mut to_mend: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        let verdicts = leases
            .iter()
            .enumerate()
            .map(|(at, lease)| {
                let answers: Vec<Result<bool>> = by_node
                    .iter_mut()
                    .map(|answers| answers.next().unwrap_or(Ok(false)))
                    .collect();
                let refused: Vec<usize> = answers
                    .iter()
                    .enumerate()
                    .filter(|(_, answer)| matches!(answer, Ok(false)))
                    .map(|(node, _)| node)
                    .collect();
                let verdict = self.decide(answers);
                if matches!(verdict, Ok(true)) && CopyRecord::of(lease).is_some() {
                    for node in refused {
                        to_mend[node].push(at);
                    }
                }
                verdict
            })
            .collect();
        self.mend(leases, &to_mend, timeout).await;
        verdicts
    }

    /// Re-creates, on each server, the copies of the leases `to_mend`
    /// names for it (by their index in `leases`): leases that a majority
    /// has just extended, and that this server refused (it lost the copy,
    /// or something else holds the name there). Each server makes a copy
    /// only where nothing holds the name (see `MEND` in the scripts). One
    /// pipeline per server, all at once, awaited: core waits for an
    /// extension in flight before it releases the lease, so a release
    /// comes after the copies it must end. A copy not made is tried again
    /// at the next extension.
    async fn mend(&self, leases: &[Lease], to_mend: &[Vec<usize>], timeout: Duration) {
        let calls = self
            .nodes
            .iter()
            .zip(to_mend)
            .filter(|(_, at)| !at.is_empty())
            .map(|(node, at)| async move {
                let copies: Vec<(&Lease, &str)> = at
                    .iter()
                    .filter_map(|&at| {
                        let lease = &leases[at];
                        CopyRecord::of(lease).map(|record| (lease, record))
                    })
                    .collect();
                node.mend_many(&copies, timeout).await
            });
        for outcome in join_all(calls).await {
            match outcome.map(|made| made.into_iter().collect::<Result<Vec<bool>>>()) {
                Ok(Ok(made)) => {
                    let mended = made.iter().filter(|&&made| made).count();
                    if mended > 0 {
                        tracing::debug!(mended, "re-created copies a server had lost");
                    }
                }
                Ok(Err(error)) | Err(error) => {
                    tracing::debug!(%error, "could not re-create a lost copy; the next extension tries again");
                }
            }
        }
    }

    /// Takes up grant `lease` under `request`'s identity on every server
    /// (see `RESUME` in the scripts): resumed when a majority swapped their
    /// copy within the lease, less the time it took and the drift margin,
    /// as a grant is decided. Each server swaps a copy once, so of two
    /// resumes of one grant at most one can reach a majority. One that does
    /// not (another took the other servers, or too few answered) releases
    /// the copies it took, by its new identity, as an attempt rolls back
    /// its partial grant: its caller is told the grant is lost, and the
    /// copies it swapped are nobody's. Servers that lack the copy are
    /// mended by the resumed grant's extensions, as for any grant.
    pub(crate) async fn resume(
        &self,
        lease: &Lease,
        request: &AcquireRequest,
    ) -> Result<Option<GrantState>> {
        let timeout = call_timeout(request.operation_timeout, request.lease);
        let started = Instant::now();
        let (n, need) = (self.nodes.len(), self.need);
        let calls = self.nodes.iter().map(|node| {
            let (node, lease, request) = (node.clone(), lease.clone(), request.clone());
            async move {
                let (resumed, _) = node.resume(&lease, &request, timeout, None).await?;
                Ok(resumed)
            }
        });
        let answers = gather(calls, |answers: &[Option<Result<bool>>]| {
            let (yes, no) = count(answers.iter().flatten());
            yes >= need || no > n - need
        })
        .await;
        let (mut taken, mut in_doubt, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Some(Ok(true)) => taken.push((index, lease.fencing_token)),
                Some(Ok(false)) => {}
                Some(Err(error)) => {
                    in_doubt.push(index);
                    errors.push(error);
                }
                None => in_doubt.push(index),
            }
        }
        let in_time = started.elapsed() + drift(request.lease) < request.lease;
        if taken.len() >= need && in_time {
            return Ok(Some(CopyRecord::state_for(request)));
        }
        self.roll_back(request, &taken, &in_doubt).await;
        if taken.len() >= need {
            return Err(too_slow("resuming", request, started.elapsed()));
        }
        // The copies taken are released: the grant, under either
        // identity, can still hold a majority only on the servers whose
        // answer was lost.
        if in_doubt.len() < need {
            return Ok(None);
        }
        Err(combined(errors))
    }

    /// Ends a lease on every server: whether a majority held it. Decided
    /// as soon as the answers in decide it; the slower servers' calls go
    /// on, and end the copies there.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let calls = self.nodes.iter().map(|node| {
            let (node, lease) = (node.clone(), lease.clone());
            async move {
                node.release(&lease.name, lease.claim, lease.id, lease.operation_timeout)
                    .await
            }
        });
        let answers = gather(calls, |answers: &[Option<Result<bool>>]| {
            let (yes, no) = count(answers.iter().flatten());
            yes >= self.need || no > self.nodes.len() - self.need
        })
        .await;
        self.decide(answers.into_iter().flatten().collect())
    }

    /// A majority's verdict on one lease: `true` when a majority said yes,
    /// `false` when too many said no for a majority to remain, and an
    /// error when the servers that did not answer decide it.
    fn decide(&self, answers: Vec<Result<bool>>) -> Result<bool> {
        let (yes, no) = count(&answers);
        if yes >= self.need {
            return Ok(true);
        }
        if no > self.nodes.len() - self.need {
            return Ok(false);
        }
        Err(combined(
            answers.into_iter().filter_map(Result::err).collect(),
        ))
    }

    /// Ends every grant of `name` on every server: whether any ended. An
    /// error when too few servers answered to be sure that no majority
    /// still holds it.
    pub(crate) async fn force_release(&self, name: &LockName, timeout: Duration) -> Result<bool> {
        let answers = join_all(
            self.nodes
                .iter()
                .map(|node| node.force_release(name, timeout)),
        )
        .await;
        let freed = answers.iter().any(|answer| matches!(answer, Ok(true)));
        let errors: Vec<Error> = answers.into_iter().filter_map(Result::err).collect();
        if errors.len() > self.nodes.len() - self.need {
            return Err(combined(errors));
        }
        Ok(freed)
    }

    /// Removes a waiting writer's mark from every server; an error only
    /// when no server answered (a mark left behind lapses within a lease).
    pub(crate) async fn end_wait(&self, request: &AcquireRequest, mark: &WriterMark) -> Result<()> {
        let answers = join_all(self.nodes.iter().map(|node| node.end_wait(request, mark))).await;
        if answers.iter().any(Result::is_ok) {
            return Ok(());
        }
        Err(combined(
            answers.into_iter().filter_map(Result::err).collect(),
        ))
    }

    /// The grants a majority of servers hold: each with the largest token
    /// its copies carry and the time until fewer than a majority of them
    /// are left.
    pub(crate) async fn list(&self) -> Result<Vec<LockInfo>> {
        let answers = join_all(self.nodes.iter().map(Node::list)).await;
        let mut copies: HashMap<(LockName, String), Vec<Listed>> = HashMap::new();
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(listed) => {
                    for copy in listed {
                        copies
                            .entry((copy.info.name.clone(), copy.id.clone()))
                            .or_default()
                            .push(copy);
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        if errors.len() > self.nodes.len() - self.need {
            return Err(combined(errors));
        }
        let mut infos: Vec<LockInfo> = copies
            .into_values()
            .filter(|copies| copies.len() >= self.need)
            .filter_map(|copies| self.merge(copies))
            .collect();
        infos.sort_by(|a, b| (&a.name, a.fencing_token).cmp(&(&b.name, b.fencing_token)));
        Ok(infos)
    }

    /// The waiting writers whose marks a majority of servers hold, each
    /// once, with the longest time any of them says it has waited (each
    /// counts by its own clock from when it first stored the mark). A
    /// mark on a minority is not shown: it is what a wait left on the
    /// servers that held the lock while a majority granted it, or a wait
    /// whose attempt split the vote, and lapses within a lease.
    pub(crate) async fn waiters(&self) -> Result<Vec<ListedWait>> {
        let answers = join_all(self.nodes.iter().map(Node::waiters)).await;
        let mut copies: HashMap<(LockName, String), Vec<ListedWait>> = HashMap::new();
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(waits) => {
                    for wait in waits {
                        copies
                            .entry((wait.name.clone(), wait.mark.clone()))
                            .or_default()
                            .push(wait);
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        if errors.len() > self.nodes.len() - self.need {
            return Err(combined(errors));
        }
        Ok(copies
            .into_values()
            .filter(|copies| copies.len() >= self.need)
            .filter_map(|copies| {
                copies
                    .into_iter()
                    .max_by_key(|copy| copy.waiter.waiting_for)
            })
            .collect())
    }

    /// One grant from its copies on a majority of servers, once it is
    /// decided: its token is the one its decided copies carry (the grant
    /// wrote it into them before it was returned). Until then every copy
    /// carries its own server's token, which may not be the grant's, so
    /// the grant is not shown; a server that answered after the grant was
    /// decided keeps its own, which is not shown either.
    fn merge(&self, copies: Vec<Listed>) -> Option<LockInfo> {
        let token = copies
            .iter()
            .filter(|copy| !copy.provisional)
            .filter_map(|copy| copy.info.fencing_token)
            .max()?;
        let mut left: Vec<Option<Duration>> =
            copies.iter().map(|copy| copy.info.expires_in).collect();
        // Longest first: the grant lasts while `need` copies do.
        left.sort_unstable_by(|a, b| b.cmp(a));
        let expires_in = left.get(self.need - 1).copied().flatten();
        let mut info = copies.into_iter().next()?.info;
        info.fencing_token = Some(token);
        info.expires_in = expires_in;
        Some(info)
    }
}

/// The record every copy of a quorum grant stores (its name and holder),
/// kept with the grant, so that an extension can re-create a copy that a
/// server lost.
pub(crate) struct CopyRecord(String);

impl CopyRecord {
    /// The state of a quorum grant made for `request`.
    pub(crate) fn state_for(request: &AcquireRequest) -> GrantState {
        GrantState::new(Self(Record::json(&request.name, &request.holder)))
    }

    /// The record of `lease`'s copies, if it is a quorum grant's.
    fn of(lease: &Lease) -> Option<&str> {
        lease.state.get::<Self>().map(|record| record.0.as_str())
    }
}

/// How many answers say yes, and how many no.
fn count<'r>(answers: impl IntoIterator<Item = &'r Result<bool>>) -> (usize, usize) {
    answers
        .into_iter()
        .fold((0, 0), |(yes, no), answer| match answer {
            Ok(true) => (yes + 1, no),
            Ok(false) => (yes, no + 1),
            Err(_) => (yes, no),
        })
}

/// How many of an attempt's `granted` grants count towards a majority of
/// `n` servers, when `abstained` of them came from servers that came back
/// empty less than a lease ago: all of them when every server granted
/// (no server then holds a copy of anyone else's grant, which a majority
/// of any valid grant would leave on at least one server that kept its
/// data), and only the others otherwise. A server that came back empty
/// may have held a copy of a grant that is still valid on the copy of one
/// other server: its vote and a third server's would make a majority
/// that shares no server with the holder's copies.
fn counted(n: usize, granted: usize, abstained: usize) -> usize {
    if granted == n {
        granted
    } else {
        granted - abstained
    }
}

/// What the servers answered to one attempt, by kind.
struct Tally {
    /// The servers that granted, with the token each issued, those that
    /// abstain included.
    granted: Vec<(usize, u64)>,
    /// How many of them abstain: they came back empty less than a lease
    /// ago (see [`counted`]).
    abstained: usize,
    /// The servers whose answer was lost or not awaited: they may have
    /// stored a copy, or may yet.
    in_doubt: Vec<usize>,
    errors: Vec<Error>,
    /// The shortest time left among the holders, where servers said.
    left: Option<Duration>,
    /// Whether some server stored the waiting writer's mark.
    marked: bool,
    /// The kind and limit a server holds the name as, when it conflicts.
    conflict: Option<Claim>,
}

impl Tally {
    fn of(answers: Vec<Option<Result<Answer>>>) -> Self {
        let mut tally = Self {
            granted: Vec::new(),
            abstained: 0,
            in_doubt: Vec::new(),
            errors: Vec::new(),
            left: None,
            marked: false,
            conflict: None,
        };
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Some(Ok(Answer::Granted(token))) => tally.granted.push((index, token)),
                // A waiter that lost for want of this server's vote comes
                // back when it counts, or sooner.
                Some(Ok(Answer::Abstained { token, left })) => {
                    tally.granted.push((index, token));
                    tally.abstained += 1;
                    tally.sooner(Some(left));
                }
                Some(Ok(Answer::Held { left, marked })) => {
                    tally.sooner(left);
                    tally.marked |= marked;
                }
                Some(Ok(Answer::Conflict(held))) => tally.conflict = Some(held),
                // Only a quorum answers this, never one server.
                Some(Ok(Answer::Split { marked, .. })) => tally.marked |= marked,
                Some(Err(error)) => {
                    tally.in_doubt.push(index);
                    tally.errors.push(error);
                }
                None => tally.in_doubt.push(index),
            }
        }
        tally
    }

    /// Keeps the shorter of the time left so far and `left`.
    fn sooner(&mut self, left: Option<Duration>) {
        self.left = match (self.left, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Runs one call per server at once, each a task of its own, and gathers
/// their answers until `settled` says that the rest cannot change the
/// outcome. Answers not in by then are `None`; their tasks go on (a call
/// may take several commands, as when a script must be loaded first), so
/// every server still gets what was asked of it.
async fn gather<T, F>(
    calls: impl IntoIterator<Item = F>,
    settled: impl Fn(&[Option<Result<T>>]) -> bool,
) -> Vec<Option<Result<T>>>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut pending: FuturesUnordered<_> = calls
        .into_iter()
        .enumerate()
        .map(|(index, call)| {
            let task = tokio::spawn(call);
            async move { (index, task.await) }
        })
        .collect();
    let mut answers: Vec<Option<Result<T>>> = (0..pending.len()).map(|_| None).collect();
    while let Some((index, answer)) = pending.next().await {
        answers[index] = Some(answer.unwrap_or_else(|failed| {
            Err(Error::Backend {
                backend: "redis",
                message: format!("a call to a redis server failed: {failed}"),
                source: None,
            })
        }));
        if settled(&answers) {
            break;
        }
    }
    answers
}

/// The time one server may take for one call on a lease: the client's
/// operation timeout, but at most a quarter of the lease, so that a slow
/// server cannot use up a lease that the others granted.
pub(crate) fn call_timeout(operation_timeout: Duration, lease: Duration) -> Duration {
    operation_timeout.min(lease / 4)
}

/// How far the servers' clocks may run apart over one lease: 1% of it,
/// and 2 ms for expiry's rounding to whole milliseconds.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Several servers' errors as one. Refused credentials stay
/// [`Error::Denied`] when every server refused them; anything else is a
/// transient backend error that names each server's.
fn combined(mut errors: Vec<Error>) -> Error {
    if errors.len() == 1 {
        return errors.remove(0);
    }
    if !errors.is_empty()
        && errors
            .iter()
            .all(|error| matches!(error, Error::Denied { .. }))
    {
        return errors.remove(0);
    }
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Error::Backend {
        backend: "redis",
        message: format!(
            "too few redis servers answered for a majority: {}",
            messages.join("; ")
        ),
        source: None,
    }
}

/// The error of a quorum call (`verb`: acquiring, resuming) that reached
/// a majority too late to count, `elapsed` after it began.
fn too_slow(verb: &str, request: &AcquireRequest, elapsed: Duration) -> Error {
    Error::Backend {
        backend: "redis",
        message: format!(
            "{verb} {} took {elapsed:?}, too long for a lease of {:?}: the servers are too \
             slow to answer, or the lease too short",
            request.name, request.lease
        ),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_server_gets_a_quarter_of_the_lease_at_most() {
        let lease = Duration::from_secs(2);
        assert_eq!(call_timeout(Duration::from_secs(10), lease), lease / 4);
        assert_eq!(
            call_timeout(Duration::from_millis(100), lease),
            Duration::from_millis(100)
        );
        assert_eq!(drift(Duration::from_secs(30)), Duration::from_millis(302));
    }
}
