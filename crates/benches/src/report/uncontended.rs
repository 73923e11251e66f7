//! Section 1, uncontended: one table of every contender's cycles per
//! backend, and its findings.

use std::fmt::Write;

use super::*;
use crate::url_kind::OBJECT_STORE;

impl Run {
    pub(super) fn uncontended(&self, out: &mut String) {
        let _ = writeln!(out, "## 1. Uncontended acquire and release on one name\n");
        let _ = writeln!(
            out,
            "One task takes and releases one name as fast as it can. The contenders of a \
             backend take turns in {ROUNDS} alternating rounds, each begun by the next contender \
             in turn, so that noise from the machine hits them alike; tooz, a separate Python process, runs once afterwards, for as \
             long as one of our contenders had in all its rounds. The ratio is against the \
             backend's baseline, marked in bold: the same server commands issued directly, \
             without the lock client (on etcd, etcd's own lock service; on an object store, \
             the raw conditional-put pair). Before a backend's rounds start, the benchmark waits \
             until the processors are at most {:.0} % busy over half a second (at most 30 s), \
             so that a server still busy with an earlier scenario does not fall into some \
             rounds and not others{}.\n",
            Quiet::THRESHOLD * 100.0,
            self.quiet_waits(),
        );
        let _ = writeln!(
            out,
            "| backend | contender | cycles/s | ratio to baseline | server commands per cycle | which |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---|");
        for b in &self.backends {
            let u = &b.uncontended;
            let baseline = u.baseline().map(Side::per_second);
            for side in &u.sides {
                let label = match side.contender {
                    Contender::Client => "distlock `LockClient`".to_owned(),
                    Contender::ClientBeside(server) => format!(
                        "measured only: distlock `LockClient`, on a server with {}",
                        u.beside[server]
                    ),
                    Contender::BackendCalls
                        if u.baseline().map(|b| b.contender) != Some(Contender::BackendCalls) =>
                    {
                        "the backend's `try_acquire` + `release`, called directly".to_owned()
                    }
                    Contender::BackendCalls => {
                        "**baseline**: the backend's `try_acquire` + `release`, called directly"
                            .to_owned()
                    }
                    Contender::RawRecipe => {
                        "**baseline**: bare add + CAS delete (`MemcachedBackend::raw`)".to_owned()
                    }
                    Contender::MongoPeer => PEER.to_owned(),
                    Contender::WriteOne => {
                        "measured only: the backend's calls with write concern `w: 1`".to_owned()
                    }
                    Contender::DeletingRelease => {
                        "measured only: the backend's acquire, released by deleting the document"
                            .to_owned()
                    }
                    Contender::Unindexed => {
                        "measured only: the backend's calls on a collection without the TTL index"
                            .to_owned()
                    }
                    Contender::UnindexedDeleting => {
                        "measured only: without the TTL index, and released by deleting the \
                         document"
                            .to_owned()
                    }
                    Contender::PeerCommands => {
                        "measured only: distributed-lock-mongo's two commands, sent directly on a \
                         collection without indexes"
                            .to_owned()
                    }
                    Contender::PeerCommandsWithToken => {
                        "measured only: the same, with a fencing token built by the server as \
                         ours is"
                            .to_owned()
                    }
                    Contender::EtcdLockRpc => format!("**baseline**: {}", etcd::LOCK_RPC),
                    Contender::Etcdctl => etcd::ETCDCTL.to_owned(),
                    Contender::PgAdvisoryLock => postgres::ADVISORY.to_owned(),
                    Contender::PgStep(step) => postgres::step_label(step).to_owned(),
                    Contender::RedisRawPair => redis::RAW_PAIR.to_owned(),
                    Contender::ObjectStoreRawPair => objectstore::RAW_PAIR.to_owned(),
                    Contender::Rslock => redis::RSLOCK.to_owned(),
                    Contender::Redlock => redis::REDLOCK.to_owned(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | {} | {} | {} |",
                    b.label,
                    label,
                    side.per_second(),
                    baseline.map_or("—".into(), |base| format!(
                        "{:.2}",
                        side.per_second() / base
                    )),
                    opt(side.commands_per_cycle()),
                    which(side),
                );
            }
            if let Some(t) = &b.tooz_uncontended {
                let _ = writeln!(
                    out,
                    "| {} | {} (Python, not interleaved) | {:.0} | {} | {} | {} |",
                    b.label,
                    self.tooz(),
                    t.per_second,
                    baseline.map_or("—".into(), |base| format!("{:.2}", t.per_second / base)),
                    opt(t.commands_per_cycle()),
                    t.commands
                        .as_ref()
                        .map_or("—".into(), |c| c.per(t.cycles as f64)),
                );
            }
        }
        let _ = writeln!(out);
        let mut goals = Vec::new();
        if let Some(b) = self.backend("MongoDB") {
            let u = &b.uncontended;
            if let (Some(client), Some(base)) = (u.side(Contender::Client), u.baseline()) {
                goals.push(share_goal(
                    "MongoDB",
                    0.9,
                    "the same two commands issued directly",
                    client,
                    base,
                ));
                if let Some(per) = client.commands_per_cycle() {
                    goals.push(goal(
                        per <= 2.0 + 1e-9,
                        format!(
                            "MongoDB: 2 server commands per cycle: {per:.2} ({}); the \
                             baseline sends {}.",
                            client
                                .commands
                                .as_ref()
                                .map_or("—".into(), |c| c.per(client.counted_cycles as f64)),
                            opt(base.commands_per_cycle()),
                        ),
                    ));
                }
            }
        }
        if let Some(b) = self.backend("memcached") {
            let u = &b.uncontended;
            if let (Some(client), Some(base)) = (u.side(Contender::Client), u.baseline()) {
                goals.push(share_goal(
                    "memcached",
                    0.9,
                    "the bare add + conditional delete",
                    client,
                    base,
                ));
            }
        }
        if let Some(b) = self.backend("etcd") {
            goals.extend(etcd::uncontended_goals(b));
        }
        if let Some(b) = self.backend("PostgreSQL") {
            goals.extend(postgres::uncontended_goals(b));
        }
        if let Some(b) = self.advisory_mode() {
            goals.extend(postgres::uncontended_goals(b));
        }
        if let Some(b) = self.backend("Redis") {
            goals.extend(redis::uncontended_goals(b));
        }
        if let Some(b) = self.backend(OBJECT_STORE) {
            goals.extend(objectstore::uncontended_goals(b));
        }
        goals_list(out, &goals);
        self.uncontended_findings(out);
    }

    pub(super) fn uncontended_findings(&self, out: &mut String) {
        let mut text = Vec::new();
        if let Some(b) = self.backend("MongoDB") {
            text.extend(mongodb::uncontended_findings(b));
        }
        if let Some(b) = self.backend("memcached") {
            let u = &b.uncontended;
            if let (Some(client), Some(calls), Some(base)) = (
                u.side(Contender::Client),
                u.side(Contender::BackendCalls),
                u.baseline(),
            ) {
                let ratio = client.per_second() / base.per_second();
                let mut t = format!(
                    "**memcached.** A cycle of ours is {} commands in two round trips \
                     (acquire: the add, which returns the item's CAS, and the fencing-token \
                     counter's increment, pipelined in one write; release: the delete \
                     conditional on the CAS the add returned, sent only over a connection to \
                     the memcached process that issued it, since a restarted memcached numbers \
                     CAS values from 1 again), against the bare recipe's {} in two. The lock \
                     client makes {:.2} of its own backend's direct calls, and {ratio:.2} of the \
                     recipe. ",
                    opt(client.commands_per_cycle()),
                    opt(base.commands_per_cycle()),
                    client.per_second() / calls.per_second(),
                );
                if ratio < 0.9 {
                    t.push_str(
                        "The difference is the third command, the token counter's increment, \
                         which a fencing token needs and the bare recipe does not send, and \
                         the client's own work. ",
                    );
                } else {
                    t.push_str(
                        "In this run the third command, the token counter's increment that a \
                         fencing token needs, cost less than the goal's margin. ",
                    );
                }
                if let Some(t_u) = &b.tooz_uncontended {
                    let _ = write!(
                        t,
                        "tooz's cycle is {} commands in three round trips (add; get, compare \
                         and delete, which is not atomic: it can delete the next holder's lock) \
                         and made {:.0} cycles/s, run on its own after our rounds.",
                        opt(t_u.commands_per_cycle()),
                        t_u.per_second
                    );
                }
                text.push(t);
            }
        }
        if let Some(b) = self.backend("etcd") {
            text.extend(etcd::uncontended_findings(b));
        }
        text.extend(postgres::uncontended_findings(
            self.backend("PostgreSQL"),
            self.advisory_mode(),
        ));
        if let Some(b) = self.backend("Redis") {
            text.extend(redis::uncontended_findings(b));
        }
        if let Some(b) = self.backend(OBJECT_STORE) {
            text.extend(objectstore::uncontended_findings(b));
        }
        text.extend(self.durability_findings());
        findings_list(out, &text);
    }
}
