//! The pipeline protocol: packing ops into one round trip, reading the
//! replies, and the follow-up round trip (`GET` and `PTTL` checks after
//! refused acquires; the re-run after a `NOSCRIPT`; the notices and member
//! reads of the script-free forms, `forms/wire.rs`).
//!
//! Per-node order must hold at the server too (a release never runs before
//! the acquire it undoes). A `NOSCRIPT` reply (the server's script cache
//! was flushed, or it restarted, or failed over) means that op did not run
//! while the ops after it in the pipeline did. So the follow-up re-runs
//! that op **and every op after it**, in order, with scripts sent by text
//! (`EVAL` cannot answer `NOSCRIPT`): the server then ends in the state of
//! the ops applied in order. Every op may run twice without harm: a
//! release or an extend of our token, a fence raise and an acquire of a
//! key that already holds our token do nothing new. An op's answer is its
//! first run's when that one did it (the later run finds the work done),
//! the re-run's otherwise. Under `Scripts::Auto`, a server's own command
//! that did not run (`ERR unknown command`: a proxy, a downgrade;
//! `NOPERM`: an ACL written for the scripts) is treated as `NOSCRIPT` is:
//! the re-run goes by script, and the backend keeps to scripts after.
//!
//! The parts: `pack.rs` writes one op into the buffer, `answer.rs` judges
//! one op's replies; this file runs the round trips between them.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Value;

use crate::backend::{BackendError, Op, Reply, ServerInfo};

use self::answer::First;
use self::pack::{pack_holder_check, request_size};
use super::Inner;
use super::confirm::{Confirmation, any_hold_granted, writes_a_hold};
use super::flight::ttl_ms;
use super::forms::wire::{self, Pending};
use super::forms::{self, Form, form_of, script_for};
use super::frame::value_text;
use super::info::Ask;
use super::pool::{Checkout, Failure};
use super::scripts::{Digests, Script};

mod answer;
mod pack;

/// What the first round trip of a batch carried, for reading its replies.
pub(super) struct FirstSent {
    /// What went first about the server (`INFO` on a new connection, the
    /// settings again once they are old).
    ask: Ask,
    /// The four `SCRIPT LOAD`s followed.
    load_scripts: bool,
    /// The ops sent, by index, each with the form it was sent in.
    sent: Vec<(usize, Form)>,
    /// Replies to read.
    expected: usize,
    /// The master's count of its replicas and a `WAIT` for them followed
    /// the ops (a cluster shard's batch that writes a hold: `confirm.rs`).
    confirm: bool,
}

impl FirstSent {
    /// Whether nothing was asked: no reply will come.
    pub(super) fn awaits_nothing(&self) -> bool {
        self.expected == 0
    }
}

/// What one op needs in the second round trip.
enum Followup {
    /// `GET` and `PTTL` after a refused acquire (2 replies).
    Get,
    /// The op again, scripts by text; a plain acquire as `SET NX PX`,
    /// `GET` and `PTTL` (3 replies). With the first run's answer, which
    /// stands when that run did the work.
    Rerun(First),
    /// A command form's second round trip (`forms/wire.rs`).
    Command(Pending),
}

impl Inner {
    /// Runs the ops whose `results` slot is empty on `c`, filling their
    /// slots. `server` is set to the identity of `c` as soon as its first
    /// round trip has answered, so that the answers already given keep the
    /// identity of the server that gave them even if a later round trip
    /// fails.
    pub(super) fn run_batch(
        &self,
        c: &mut Checkout,
        ops: &[Op<'_>],
        results: &mut [Option<Result<Reply, BackendError>>],
        server: &mut Option<ServerInfo>,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let first = self.send_first(c, ops, results, deadline)?;
        self.finish_batch(c, &first, ops, results, server, deadline)
    }

    /// The first half of [`run_batch`](Self::run_batch): packs the ops
    /// whose `results` slot is empty (behind `INFO` on a new connection,
    /// and `SCRIPT LOAD`s while the digests are unknown) and writes them,
    /// without reading anything.
    pub(super) fn send_first(
        &self,
        c: &mut Checkout,
        ops: &[Op<'_>],
        results: &mut [Option<Result<Reply, BackendError>>],
        deadline: Instant,
    ) -> Result<FirstSent, Failure> {
        let ask = c.conn.ask(c.at);
        let digests = self.digests.lock().clone();
        let version = c.conn.version();
        let commands = if self.commands_refused.load(Ordering::Relaxed) {
            forms::Commands::default()
        } else {
            forms::Commands::of(version)
        };
        let mut sent = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            match form_of(op, commands, self.scripts) {
                Ok(form) => sent.push((i, form)),
                Err(needs) => results[i] = Some(Err(self.needs_script(version, needs))),
            }
        }
        let load_scripts =
            digests.is_none() && sent.iter().any(|(_, f)| matches!(f, Form::Script(_)));
        let mut buf = c.conn.request_buf();
        buf.reserve(request_size(ops, &sent));
        ask.pack(&mut buf);
        if load_scripts {
            for script in Script::ALL {
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script.text())
                    .write_packed_command(&mut buf);
            }
        }
        let mut expected = ask.replies() + Script::ALL.len() * usize::from(load_scripts);
        for &(i, form) in &sent {
            self.pack_op(&ops[i], form, ttl_ms(&ops[i]), digests.as_deref(), &mut buf);
            expected += wire::replies(form, &ops[i]);
        }
        let confirm = self.cluster_shard && sent.iter().any(|&(i, _)| writes_a_hold(&ops[i]));
        if confirm {
            expected += self.pack_confirm(deadline, &mut buf);
        }
        let sent_now = c.conn.send(&buf, deadline);
        c.conn.keep_request_buf(buf);
        sent_now.map_err(|fault| self.failure(&fault, 0))?;
        Ok(FirstSent {
            ask,
            load_scripts,
            sent,
            expected,
            confirm,
        })
    }

    /// The second half of [`run_batch`](Self::run_batch): reads the first
    /// round trip's replies and runs the follow-up round trip if one is
    /// needed, filling `results` and `server`.
    pub(super) fn finish_batch(
        &self,
        c: &mut Checkout,
        first: &FirstSent,
        ops: &[Op<'_>],
        results: &mut [Option<Result<Reply, BackendError>>],
        server: &mut Option<ServerInfo>,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let mut confirmed = self.read_rounds(c, first, ops, results, server, deadline)?;
        if let Some(wider) = confirmed.and_then(Confirmation::wider_wait)
            && any_hold_granted(ops, results)
        {
            let acked = self.wait_wider(c, wider, deadline)?;
            confirmed = confirmed.map(|before| before.widened(acked));
        }
        if let Some(confirmed) = confirmed {
            self.withhold_unconfirmed(ops, results, confirmed);
            if let Some(server) = server.as_mut() {
                server.confirming_replicas = confirmed.required();
            }
        }
        Ok(())
    }

    /// The rounds of [`finish_batch`](Self::finish_batch): fills `results`
    /// and `server`, and says what the replicas confirmed (`None`: no
    /// confirmation was asked).
    fn read_rounds(
        &self,
        c: &mut Checkout,
        first: &FirstSent,
        ops: &[Op<'_>],
        results: &mut [Option<Result<Reply, BackendError>>],
        server: &mut Option<ServerInfo>,
        deadline: Instant,
    ) -> Result<Option<Confirmation>, Failure> {
        let FirstSent {
            ask,
            load_scripts,
            ref sent,
            expected,
            confirm,
        } = *first;
        let mut list = c
            .conn
            .receive(expected, deadline)
            .map_err(|(fault, read)| self.failure(&fault, read))?;
        let mut replies = list.drain(..);
        c.conn.learn(ask, &mut replies);
        // The clock read at the checkout: the uptime needs no finer time.
        *server = c.conn.server(c.at);
        if load_scripts {
            // A refused SCRIPT LOAD (an ACL without it) leaves the digests
            // unknown: the scripts then go by text, which needs none.
            let loaded = Script::ALL
                .iter()
                .map(|_| replies.next().as_ref().and_then(value_text))
                .collect();
            if let Some(learned) = Digests::from_replies(loaded) {
                *self.digests.lock() = Some(std::sync::Arc::new(learned));
            }
        }
        // An answer of the first round trip stands, or the op needs a
        // second one (every op from the first re-run on runs again). Read
        // in one pass, in order: no list of the first answers (a
        // `followups` list is made only when one is needed).
        let mut followups = Vec::new();
        let mut rerun = false;
        for &(i, form) in sent {
            let first = self.first_answer(&ops[i], form, &mut replies);
            rerun = rerun || matches!(first, First::Rerun);
            let followup = match first {
                first if rerun => Followup::Rerun(first),
                First::Done(result) => {
                    results[i] = Some(result);
                    continue;
                }
                First::NeedsGet => Followup::Get,
                First::Pending(pending) => Followup::Command(pending),
                First::Rerun => Followup::Rerun(First::Rerun),
            };
            followups.push(((i, form), followup));
        }
        let mut confirmed = confirm.then(|| self.read_confirm(&mut replies));
        // The list's room serves the connection's next batch.
        drop(replies);
        c.conn.keep_replies(list);
        if followups.is_empty() {
            return Ok(confirmed);
        }

        let mut buf = Vec::new();
        let mut expected = 0;
        for ((i, _), followup) in &followups {
            let op = &ops[*i];
            expected += match followup {
                Followup::Get => {
                    pack_holder_check(op, &mut buf);
                    2
                }
                Followup::Rerun(_) => {
                    let form = script_for(op).map_or(Form::SetNx, Form::Script);
                    self.pack_op(op, form, ttl_ms(op), None, &mut buf);
                    if form == Form::SetNx {
                        pack_holder_check(op, &mut buf);
                        3
                    } else {
                        1
                    }
                }
                Followup::Command(pending) => wire::pack_followup(pending, op, &mut buf),
            };
        }
        // Writes run again need their own confirmation.
        let confirm_again = confirm
            && followups
                .iter()
                .any(|((i, _), f)| matches!(f, Followup::Rerun(_)) && writes_a_hold(&ops[*i]));
        if confirm_again {
            expected += self.pack_confirm(deadline, &mut buf);
        }
        let replies = c
            .conn
            .exchange(&buf, expected, deadline)
            .map_err(|(fault, _)| self.failure_after_first(&fault))?;
        let mut replies = replies.into_iter();
        for ((i, form), followup) in followups {
            let op = &ops[i];
            results[i] = Some(match followup {
                Followup::Get => {
                    let get = replies.next().unwrap_or(Value::Nil);
                    let pttl = replies.next().unwrap_or(Value::Nil);
                    self.refused_acquire(op, get, &pttl)
                }
                Followup::Command(pending) => wire::read_followup(&pending, op, &mut replies)
                    .map_err(|bad| self.bad_reply(op, form, bad)),
                Followup::Rerun(first) => {
                    let again = self.rerun_answer(op, &mut replies);
                    match first {
                        // The first run did the work: its answer stands.
                        First::Done(Ok(
                            reply @ (Reply::Yes | Reply::Fenced(_) | Reply::Notified(_)),
                        )) => Ok(reply),
                        // A release that deleted, its notice not sent: released.
                        First::Pending(Pending::Announce { .. }) => Ok(Reply::Yes),
                        _ => again,
                    }
                }
            });
        }
        if confirm_again {
            let again = self.read_confirm(&mut replies);
            confirmed = confirmed.map(|before| before.and(again));
        }
        Ok(confirmed)
    }
}
