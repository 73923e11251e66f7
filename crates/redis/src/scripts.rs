//! The server-side scripts: every decision is one script on one name's
//! keys (see the keys module for what each holds), judged by the server's
//! clock (`TIME`). Names, identities and records travel as arguments,
//! never in a script's text.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use distlock_core::MAX_PERMITS;
use redis::Script;

use crate::config::DEFAULT_TOKEN_KEEP;

// The helpers scripts start with, each script with the ones it uses
// only: a script's text runs in full at every call, helpers' definitions
// included (each a closure made anew). The common paths, a writer on a
// free name and an exclusive release, come before any of them.

/// `clock()`: the server's time in ms and in µs since the epoch.
const CLOCK: &str = r"
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end
";

/// `int(n)`: a number as an integer string (Lua's `tostring` would write
/// large numbers with an exponent).
const INT: &str = r"
local function int(n) return string.format('%.0f', n) end
";

/// `prune(z, h, now)`: drops the expired members of sorted set `z` (and
/// their records in hash `h`, when given), and returns how many live. It
/// writes nothing when nothing expired: Redis checks a script against
/// `maxmemory` only until its first write, so an attempt on a server out
/// of memory is refused with `OOM` rather than let through by a no-op
/// write. When members did expire, their removal is that first write, and
/// the grant after it goes through past `maxmemory`: whole, never in part.
const PRUNE: &str = r"
local function prune(z, h, now)
  local dead = redis.call('ZRANGEBYSCORE', z, '-inf', int(now))
  local n = redis.call('ZCARD', z) - #dead
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', z, '-inf', int(now))
    if h then
      redis.call('HDEL', h, unpack(dead))
      if n == 0 then redis.call('DEL', h) end
    end
  end
  return n
end
";

/// `expire_with_last(z, h)`: lets `z` (and `h`) expire with the last
/// member of `z`, so nothing outlives its grants.
const EXPIRE_WITH_LAST: &str = r"
local function expire_with_last(z, h)
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if #last == 2 then
    redis.call('PEXPIREAT', z, last[2])
    if h then redis.call('PEXPIREAT', h, last[2]) end
  end
end
";

/// `first_left(z, now)`: ms until the first member of `z` expires, or -1.
const FIRST_LEFT: &str = r"
local function first_left(z, now)
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if #first == 2 then return math.max(tonumber(first[2]) - now, 0) end
  return -1
end
";

/// `next_token(t, now_us, ttl)`: `max(previous + 1, now in µs)`, stored in
/// `t` for `ttl` ms. The clock is nearly always ahead of the counter, so
/// it is stored first, and the previous value it replaced read in the same
/// command; only a counter at or past the clock is written again.
const NEXT_TOKEN: &str = r"
local function next_token(t, now_us)
  local prev = tonumber(redis.call('SET', t, int(now_us), 'PX', COUNTER_TTL, 'GET') or '0') or 0
  if prev < now_us then return now_us end
  redis.call('SET', t, int(prev + 1), 'PX', COUNTER_TTL)
  return prev + 1
end
";

/// `owns(x, id)`: whether exclusive grant `x` is grant `id`'s.
const OWNS: &str = r"
local function owns(x, id)
  local v = redis.call('GET', x)
  return v and string.sub(v, 1, 32) == id
end
";

/// `remember(done, call, now, keep)`: records in sorted set `done` that
/// release `call` ended a grant, for `keep` ms, and forgets the calls
/// whose time is up; the key expires with the last of them.
const REMEMBER: &str = r"
local function remember(done, call, now, keep)
  redis.call('ZREMRANGEBYSCORE', done, '-inf', int(now))
  redis.call('ZADD', done, int(now + keep), call)
  expire_with_last(done, false)
end
";

/// `answered(done, call, now)`: 1 when release `call`, run again, ended a
/// grant at its first run (see [`REMEMBER`]), else 0.
const ANSWERED: &str = r"
local function answered(done, call, now)
  if not call then return 0 end
  local until_ms = redis.call('ZSCORE', done, call)
  if until_ms and tonumber(until_ms) > now then return 1 end
  return 0
end
";

/// The start of [`ACQUIRE`]: in quorum mode (a provisional copy, `~`),
/// whether this server abstains, and for how long. A server that came
/// back empty (restarted without persistence, or its data lost) does not
/// know which grants it held, some of which may still be valid on the
/// copies of other servers; so its grants count towards no majority
/// (the quorum counts them only when every server granted) until a lease
/// has passed since it came back: every grant it held before has ended
/// by then, if its lease was no longer than the one asked for now. It
/// knows it came back by `KEYS[8]`, the prefix's epoch, written with its
/// `TIME` in ms, with no expiry, by the first attempt that finds it
/// missing. `abstain` is the ms of abstention left, 0 when it counts; it
/// ends every granted reply. Read first, and written only when missing,
/// so that an attempt on a server out of memory still answers "held".
const ABSTAIN: &str = r"
local abstain = 0
if ARGV[5] == '~' then
  local time = redis.call('TIME')
  local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local since = tonumber(redis.call('GET', KEYS[8]) or '')
  if not since then
    since = ms
    redis.call('SET', KEYS[8], string.format('%.0f', ms))
  end
  abstain = math.max(since + tonumber(ARGV[3]) - ms, 0)
end
";

/// The start of [`ACQUIRE`], after [`ABSTAIN`]: a writer on a free name, the common case, is
/// granted at once (the counter and the grant as `next_token` and the
/// rest of the script write them). It comes before any helper is defined,
/// and calls none: defining a helper costs every run that passes it, and
/// this path is most runs. Every command a script runs costs a few µs on
/// top of what the command does, so this path runs the four it needs and
/// no more, and keeps the token as the digits `TIME` gives rather than
/// printing a number: digit strings of one length compare as their values
/// do, and only a counter at or past the clock needs arithmetic.
const ACQUIRE_FREE: &str = r"
if ARGV[1] == 'x' and redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  local time = redis.call('TIME')
  local token = time[1] .. string.sub('00000' .. time[2], -6)
  local prev = redis.call('SET', KEYS[5], token, 'PX', COUNTER_TTL, 'GET')
  if prev and #prev >= #token and (#prev > #token or prev >= token) then
    local ahead = tonumber(prev)
    if ahead and ahead >= tonumber(token) then
      token = string.format('%.0f', ahead + 1)
      redis.call('SET', KEYS[5], token, 'PX', COUNTER_TTL)
    end
  end
  redis.call('SET', KEYS[1], ARGV[2] .. ':' .. (ARGV[5] or '') .. token .. ':' .. ARGV[4], 'PX', ARGV[3])
  if (ARGV[6] or '') ~= '' and redis.call('ZREM', KEYS[4], ARGV[6]) == 1 then
    redis.call('HDEL', KEYS[7], ARGV[6])
  end
  return {1, token, abstain}
end
";

/// One attempt. KEYS: x s i w t a, then `wi` when a writer sends its
/// mark, quorum mode's copies and campaigns always, and after it the
/// prefix's epoch in quorum mode (see [`ABSTAIN`]) or the name's `terms`
/// for a campaign (see [`campaign_epilogue`]). ARGV: claim (`x`, `s` or `p`), grant
/// id, lease ms, record, then, each left off when it is the last and
/// empty: what the stored token starts with (`~` for quorum mode's
/// copies, whose token is provisional until the grant is decided and
/// [`RAISE`] writes the grant's own), the writer's mark, the permit limit.
/// The script starts with [`constants`].
///
/// A waiting writer's mark is a member of `w` scored by its expiry, a
/// lease after the attempt that last stored it, with its record in `wi`
/// beside the server's `TIME` (µs) when it was first stored: who waits,
/// and since when, for `list` (see [`WAITERS`]). Both go with its grant or
/// the end of its wait; a mark that lapsed (its waiter vanished) is
/// dropped, record and all, by the next writer that marks. A reader only
/// counts the live marks, and writes none of this.
///
/// Returns `{1, token, abstain}` when granted (the token as a number, or
/// as its digits; `abstain` as in [`ABSTAIN`]); `{0, ms left or -1, marked}` when held (`marked`: a waiting
/// writer's mark is stored), having set `a` for as long, so that a
/// release within that time is announced; `{2, kind, limit}` when the
/// name is held as another kind or limit.
///
/// It starts with [`ABSTAIN`] and [`ACQUIRE_FREE`], and its helpers come
/// after that.
const ACQUIRE: &str = r"
local x, s, i, w, t, a = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local claim, id, lease, record = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local stored, mark, limit = ARGV[5] or '', ARGV[6] or '', tonumber(ARGV[7] or '0')
local now, now_us = clock()
local writer = redis.call('PTTL', x)
-- This very attempt, run again (a cluster client sends a script again
-- when the connection broke before its answer): the grant it made is
-- answered again, never taken for someone else's.
if writer ~= -2 and claim == 'x' then
  local v = redis.call('GET', x)
  if v and string.sub(v, 1, 32) == id then
    return {1, tonumber(string.match(string.sub(v, 34), '^~?(%d+)')), abstain}
  end
end
-- A writer on a name no reader or permit holder ever used looks no
-- further; waiting writers' marks keep only readers out.
local holders = 0
if claim ~= 'x' or redis.call('EXISTS', s) == 1 then holders = prune(s, i, now) end
if claim ~= 'x' and holders > 0 then
  local again = redis.call('HGET', i, id)
  if again and redis.call('ZSCORE', s, id) then
    return {1, tonumber(string.match(again, '^~?(%d+)')), abstain}
  end
end
local kind, held_limit = false, 0
if holders > 0 then
  kind = redis.call('HGET', i, 'kind') or 'x'
  held_limit = tonumber(redis.call('HGET', i, 'limit') or '0') or 0
end
local marks = 0
if claim == 's' then marks = redis.call('ZCOUNT', w, '(' .. int(now), '+inf') end
-- Sets `a` for `left` ms, so that a release of the exclusive grant
-- within that time is announced (see RELEASE_EXCLUSIVE). A write refused
-- (a server out of memory) only leaves this waiter to its timed retry.
local function awaited(left)
  if left > 0 then redis.pcall('SET', a, '', 'PX', left) end
  return left
end
local function join()
  local token = next_token(t, now_us)
  redis.call('ZADD', s, int(now + lease), id)
  redis.call('HSET', i, 'kind', claim, 'limit', int(limit), id, stored .. int(token) .. ':' .. record)
  expire_with_last(s, i)
  return {1, token, abstain}
end
if claim == 'p' then
  if writer ~= -2 then return {2, 'x', 0} end
  if holders > 0 and kind ~= 'p' then return {2, kind, 0} end
  if holders > 0 and held_limit ~= limit then return {2, 'p', held_limit} end
  if holders >= limit then return {0, first_left(s, now), 0} end
  return join()
end
if holders > 0 and kind == 'p' then return {2, 'p', held_limit} end
if claim == 's' then
  if writer ~= -2 then return {0, awaited(writer), 0} end
  if marks > 0 then
    local first = redis.call('ZRANGEBYSCORE', w, '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    return {0, awaited(tonumber(first[2]) - now), 0}
  end
  if holders >= MAX_READERS then return {0, first_left(s, now), 0} end
  return join()
end
if writer == -2 and holders == 0 then
  local token = next_token(t, now_us)
  redis.call('SET', x, id .. ':' .. stored .. int(token) .. ':' .. record, 'PX', ARGV[3])
  if mark ~= '' and redis.call('ZREM', w, mark) == 1 then redis.call('HDEL', KEYS[7], mark) end
  return {1, token, abstain}
end
local marked = 0
if mark ~= '' then
  local wi = KEYS[7]
  prune(w, wi, now)
  redis.call('ZADD', w, int(now + lease), mark)
  redis.call('HSETNX', wi, mark, int(now_us) .. ':' .. record)
  expire_with_last(w, wi)
  marked = 1
end
if writer == -2 then writer = first_left(s, now) else awaited(writer) end
return {0, writer, marked}
";

/// Extends one grant if it is still ours. KEYS: x s i. ARGV: claim, grant
/// id, lease ms, and, for an exclusive grant, a fencing token or nothing.
/// The token is that of a grant handed over without a command under the
/// stored identity: it replaces the stored token when larger, so that
/// `list` shows the current one. Returns 1 when extended, 0 when the grant
/// is gone.
const EXTEND: &str = r"
local x, s, i = KEYS[1], KEYS[2], KEYS[3]
local claim, id, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
if claim == 'x' then
  if not owns(x, id) then return 0 end
  local token = tonumber(ARGV[4] or '')
  if token then
    local rest = string.sub(redis.call('GET', x), 34)
    local stored = tonumber(string.match(rest, '^~?(%d+)')) or 0
    if token > stored then
      local record = string.sub(rest, (string.find(rest, ':', 1, true)))
      redis.call('SET', x, id .. ':' .. int(token) .. record, 'PX', ARGV[3])
      return 1
    end
  end
  redis.call('PEXPIRE', x, ARGV[3])
  return 1
end
local now = clock()
local score = redis.call('ZSCORE', s, id)
if score and tonumber(score) > now then
  redis.call('ZADD', s, int(now + lease), id)
  expire_with_last(s, i)
  return 1
end
return 0
";

/// Ends one grant if it is still ours, and announces it. KEYS: x s i a,
/// and in cluster mode `done`. ARGV: claim, grant id, channel, and in
/// cluster mode how long to remember the call (ms) and the call's own
/// identity. Returns 1 when a live grant ended.
///
/// An exclusive grant on one server, the common case, is ended first, as
/// `owns` would check it, before any helper is defined (see
/// [`ACQUIRE_FREE`]). It is announced only when `a` is there: an attempt
/// that found the grant held set it (see [`ACQUIRE`]), and the same `DEL`
/// that ends the grant tells, so that a release nobody waits for runs no
/// `PUBLISH`.
///
/// In cluster mode the driver sends a script again when the connection
/// broke before its answer, and a second run would find the grant gone
/// and answer 0, a loss the holder never had. So there, and only there (it
/// costs a write), a release that ended a grant is remembered in `done`
/// under the call's identity for as long as the call may wait for its
/// answer, and the same call run again answers 1 (see [`REMEMBER`]). A
/// release called again is another call, and still finds nothing.
const RELEASE_EXCLUSIVE: &str = r"
if ARGV[1] == 'x' and not ARGV[4] then
  local v = redis.call('GET', KEYS[1])
  if v and string.sub(v, 1, 32) == ARGV[2] then
    if redis.call('DEL', KEYS[1], KEYS[4]) == 2 then redis.call('PUBLISH', ARGV[3], '') end
    return 1
  end
  return 0
end
";

/// The rest of the release, after [`RELEASE_EXCLUSIVE`] and the helpers:
/// a reader's or a permit holder's grant, and in cluster mode any grant,
/// remembered once ended.
const RELEASE: &str = r"
local x, s, i, a, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local claim, id, channel = ARGV[1], ARGV[2], ARGV[3]
local keep, call = tonumber(ARGV[4] or ''), ARGV[5]
local now = clock()
local function ended()
  if keep then remember(done, call, now, keep) end
  return 1
end
if claim == 'x' then
  if not owns(x, id) then return answered(done, call, now) end
  if redis.call('DEL', x, a) == 2 then redis.call('PUBLISH', channel, '') end
  return ended()
end
local score = redis.call('ZSCORE', s, id)
if not score then return answered(done, call, now) end
redis.call('ZREM', s, id)
redis.call('HDEL', i, id)
if redis.call('ZCARD', s) == 0 then redis.call('DEL', i) end
if tonumber(score) <= now then return 0 end
redis.call('PUBLISH', channel, '')
return ended()
";

/// Ends an exclusive grant and makes the next in one step. KEYS: x t.
/// ARGV: old id, new id, lease ms, record, how many tokens to take. The
/// new grant gets the first of them; the counter is left at the last, so
/// every later grant of any client gets more than all of them, and the
/// others are this process's for hand-overs without a command. Returns
/// the new token, or 0 when the old grant was no longer ours.
///
/// Run again with the same arguments (the cluster driver sends a script
/// again when the connection broke before its answer), it finds the new
/// grant in the old one's place, and answers its token again, as
/// [`ACQUIRE`] does for an attempt run again: an answer of 0 would report
/// a loss the old holder never had, and leave the new grant to nobody for
/// a lease.
const HAND_OVER: &str = r"
local x, t = KEYS[1], KEYS[2]
local v = redis.call('GET', x)
local holder = v and string.sub(v, 1, 32)
if holder == ARGV[2] then return tonumber(string.match(string.sub(v, 34), '^(%d+)')) end
if holder ~= ARGV[1] then return 0 end
local _, now_us = clock()
local token = next_token(t, now_us)
local block = tonumber(ARGV[5]) or 1
if block > 1 then redis.call('SET', t, int(token + block - 1), 'PX', COUNTER_TTL) end
redis.call('SET', x, ARGV[2] .. ':' .. int(token) .. ':' .. ARGV[4], 'PX', ARGV[3])
return token
";

/// Removes a waiting writer's mark and its record, and announces it:
/// readers held back by it may go in. KEYS: w wi. ARGV: mark, channel.
const END_WAIT: &str = r"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('PUBLISH', ARGV[2], '')
end
return 0
";

/// Reads a name's waiting writers, for `list`. KEYS: w wi. Returns
/// `{mark, µs waited, record, mark, µs waited, record, …}` for each live
/// mark with a record, by the server's clock, in no set order. A key of
/// another type under our prefix reads as absent.
const WAITERS: &str = r"
local w, wi = KEYS[1], KEYS[2]
local now, now_us = clock()
local out = {}
local live = redis.pcall('ZRANGEBYSCORE', w, '(' .. int(now), '+inf')
if type(live) == 'table' and #live > 0 and redis.call('TYPE', wi)['ok'] == 'hash' then
  for _, mark in ipairs(live) do
    local stored = redis.call('HGET', wi, mark)
    local since = stored and tonumber(string.match(stored, '^(%d+):'))
    if since then
      table.insert(out, mark)
      table.insert(out, math.max(now_us - since, 0))
      table.insert(out, string.sub(stored, #string.match(stored, '^%d+:') + 1))
    end
  end
end
return out
";

/// Announces a delayed release, which cut the exclusive grant's lease to
/// the time its `min_hold` has left, when an attempt found the grant held
/// (`a` is there): the waiters it told the old time left try again, and
/// learn the new. KEYS: a. ARGV: channel. Returns 1 when announced.
const ANNOUNCE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('PUBLISH', ARGV[1], '')
return 1
";

/// Ends every grant of a name, and announces it. KEYS: x s i a, and in
/// cluster mode `done`. ARGV: channel, and in cluster mode how long to
/// remember the call (ms) and its identity. Returns 1 when a live grant
/// ended. Waiting writers' marks stay.
///
/// In cluster mode a call that ended a grant is remembered, and the same
/// call run again (the driver sends it again after a broken connection)
/// answers 1, not "nothing was held"; see [`RELEASE_EXCLUSIVE`].
const FORCE_RELEASE: &str = r"
local now = clock()
local keep, call = tonumber(ARGV[2] or ''), ARGV[3]
if keep and answered(KEYS[5], call, now) == 1 then return 1 end
local held = redis.call('EXISTS', KEYS[1]) + redis.call('ZCOUNT', KEYS[2], '(' .. int(now), '+inf')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if held > 0 then
  redis.call('PUBLISH', ARGV[1], '')
  if keep then remember(KEYS[5], call, now, keep) end
  return 1
end
return 0
";

/// Reads a name's live grants, for `list`. KEYS: x s i. Returns
/// `{exclusive value or false, its ms left, kind, limit, id, ms left,
/// stored, id, ms left, stored, …}`. A key of another type under our
/// prefix reads as absent.
const INSPECT: &str = r"
local x, s, i = KEYS[1], KEYS[2], KEYS[3]
local now = clock()
local out = {false, -2, false, 0}
local v = redis.pcall('GET', x)
if type(v) == 'string' then
  out[1] = v
  out[2] = redis.call('PTTL', x)
end
local live = redis.pcall('ZRANGEBYSCORE', s, '(' .. int(now), '+inf', 'WITHSCORES')
if type(live) == 'table' and #live > 0 and redis.call('TYPE', i)['ok'] == 'hash' then
  out[3] = redis.call('HGET', i, 'kind')
  out[4] = tonumber(redis.call('HGET', i, 'limit') or '0') or 0
  for n = 1, #live, 2 do
    local stored = redis.call('HGET', i, live[n])
    if stored then
      table.insert(out, live[n])
      table.insert(out, tonumber(live[n + 1]) - now)
      table.insert(out, stored)
    end
  end
end
return out
";

/// Reads a name's terms for an observer, which then waits for the next
/// release: `a` is set for as long as the exclusive grant has left, and a
/// second at least (the observer looks again sooner), so that the release
/// is announced (see [`RELEASE_EXCLUSIVE`]). KEYS: terms x a. Returns the
/// list of terms, newest first.
const TERMS: &str = r"
redis.pcall('SET', KEYS[3], '', 'PX', math.max(redis.call('PTTL', KEYS[2]), 1000))
return redis.call('LRANGE', KEYS[1], 0, -1)
";

/// Raises a name's token counter to at least a quorum grant's token, so
/// that a later majority, which shares a server with this one, issues a
/// larger token; and writes that token into this server's copy of the
/// grant, no longer provisional (without its `~`), so that `list` finds it
/// on a majority, decided. KEYS: t x i. ARGV: token, claim, grant id.
/// Returns 1.
const RAISE: &str = r"
local t, x, i = KEYS[1], KEYS[2], KEYS[3]
local token, claim, id = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if (tonumber(redis.call('GET', t) or '0') or 0) < token then
  redis.call('SET', t, int(token), 'PX', COUNTER_TTL)
end
if claim == 'x' then
  if owns(x, id) then
    local rest = string.sub(redis.call('GET', x), 34)
    local record = string.sub(rest, (string.find(rest, ':', 1, true)))
    redis.call('SET', x, id .. ':' .. int(token) .. record, 'KEEPTTL')
  end
else
  local stored = redis.call('HGET', i, id)
  if stored then
    local record = string.sub(stored, (string.find(stored, ':', 1, true)))
    redis.call('HSET', i, id, int(token) .. record)
  end
end
return 1
";

/// Re-creates the copy of a quorum grant on a server that lost it (it
/// came back empty, or the copy ran out there), after a majority of the
/// servers extended the grant: only where nothing holds the name, so that
/// a grant someone else made on this server is never overwritten or
/// hidden. The copy is decided (no `~`) and carries the grant's own
/// token, and the name's counter is raised to that token, as [`RAISE`]
/// does at the grant, should the server have lost it too. It leaves the
/// prefix's epoch alone: the copy is no vote (see the quorum module).
/// KEYS: x s i t. ARGV: claim (`x` or `s`), grant id, lease ms, token,
/// record. Returns 1 when it made the copy, 0 when the name was held
/// there (by anyone, this grant included) or the claim is a permit's.
const MEND: &str = r"
local x, s, i, t = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local claim, id, lease, token, record = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = clock()
local holders = 0
if redis.call('EXISTS', s) == 1 then holders = prune(s, i, now) end
if claim == 'x' then
  if holders > 0 then return 0 end
  if not redis.call('SET', x, id .. ':' .. token .. ':' .. record, 'PX', ARGV[3], 'NX') then
    return 0
  end
elseif claim == 's' then
  if redis.call('EXISTS', x) == 1 then return 0 end
  if holders > 0 and (redis.call('HGET', i, 'kind') ~= 's' or redis.call('ZSCORE', s, id)
      or holders >= MAX_READERS) then
    return 0
  end
  redis.call('ZADD', s, int(now + lease), id)
  redis.call('HSET', i, 'kind', 's', 'limit', '0', id, token .. ':' .. record)
  expire_with_last(s, i)
else
  return 0
end
if (tonumber(redis.call('GET', t) or '0') or 0) < tonumber(token) then
  redis.call('SET', t, token, 'PX', COUNTER_TTL)
end
return 1
";

/// Takes up a grant by its identity, for a process that restarted while
/// it held the lock (core's `Resumes`): if grant `old` of the claim holds
/// the name with fencing token `token` (or, for a quorum copy whose token
/// is still its server's own, `~`, with any: the grant's token was decided
/// elsewhere, and the identity is the grant's alone), not expired by the
/// server's clock, it is stored under `new` instead, with the new holder's record,
/// to last `lease` ms from the server's now, as an extension would; its
/// token, its claim and its place among the holders stay. In quorum mode
/// a copy's token is written decided (no `~`): only a grant that was
/// returned to its holder has a handle. The name's counter is raised to
/// the token if it has less (it expired, or a restart lost it), never
/// lowered: the tokens a hand-over reserved above it stay reserved, so
/// no later grant repeats one. KEYS: x s i t. ARGV: claim (`x`, `s` or
/// `p`), old id, token, new id, lease ms, record, the permit limit.
/// Returns 1 when the grant is now `new`'s, 0 when no such grant holds
/// the name (released, run out, resumed already, or another token), and
/// then it changed nothing.
///
/// Run again with the same arguments (the cluster driver sends a script
/// again when the connection broke before its answer), it finds the
/// grant under `new`, with the token, and answers 1 again: `new` is this
/// call's own.
///
/// Readers' and permits' new member and record are written before the
/// old ones are removed, so that on a server out of memory the first
/// write is refused with `OOM` and nothing changed.
const RESUME: &str = r"
local x, s, i, t = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local claim, old, token, new, lease, record = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
-- Whether a stored `<token>:<record>` carries the grant's token: a
-- quorum copy still provisional (`~`, its raise lost or not awaited)
-- carries its server's own, and is the grant's by its identity alone.
local function ours(stored)
  local provisional, digits = string.match(stored, '^(~?)(%d+):')
  return provisional == '~' or (digits ~= nil and digits == token)
end
local function raise()
  if (tonumber(redis.call('GET', t) or '0') or 0) < tonumber(token) then
    redis.call('SET', t, token, 'PX', COUNTER_TTL)
  end
  return 1
end
if claim == 'x' then
  local v = redis.call('GET', x)
  if not v or not ours(string.sub(v, 34)) then return 0 end
  local id = string.sub(v, 1, 32)
  if id == new then return 1 end
  if id ~= old then return 0 end
  redis.call('SET', x, new .. ':' .. token .. ':' .. record, 'PX', lease)
  return raise()
end
local now = clock()
if redis.call('HGET', i, 'kind') ~= claim then return 0 end
if claim == 'p' and redis.call('HGET', i, 'limit') ~= ARGV[7] then return 0 end
local function holds(id)
  local score = redis.call('ZSCORE', s, id)
  local stored = redis.call('HGET', i, id)
  return score and tonumber(score) > now and stored and ours(stored)
end
if holds(new) then return 1 end
if not holds(old) then return 0 end
redis.call('ZADD', s, int(now + tonumber(lease)), new)
redis.call('HSET', i, new, token .. ':' .. record)
redis.call('ZREM', s, old)
redis.call('HDEL', i, old)
expire_with_last(s, i)
return raise()
";

/// A campaign's attempt: [`ACQUIRE`] run as a function, then, when it
/// granted, the term recorded in the same script. KEYS: ACQUIRE's, `wi`
/// seventh, then `r`, the name's list of terms, newest first, each
/// `<term>:<previous term or nothing>:<record>`. ARGV: ACQUIRE's. The
/// list keeps the last `TERMS_KEPT` terms, and expires with the token
/// counter. A term already at the head is this attempt's own, run again
/// (see ACQUIRE), and is not recorded twice.
fn campaign_epilogue() -> String {
    format!(
        r"
local reply = attempt()
if reply[1] == 1 then
  local r, term = KEYS[8], reply[2]
  if type(term) == 'number' then term = string.format('%.0f', term) end
  local head = redis.call('LINDEX', r, 0)
  local newest = head and string.match(head, '^(%d+):') or ''
  if newest ~= term then
    redis.call('LPUSH', r, term .. ':' .. newest .. ':' .. ARGV[4])
    redis.call('LTRIM', r, 0, {last})
    redis.call('PEXPIRE', r, COUNTER_TTL)
  end
end
return reply
",
        last = distlock_core::backend::TERMS_KEPT - 1
    )
}

/// Withdraws the term of a campaign's grant that its holder never
/// received (core's `TermLog::withdraw`): removes the entry of term
/// `ARGV[1]` from list `r`, if it was recorded with record `ARGV[3]`, and
/// gives its previous term to the entry after it (the one before it in
/// the list, which runs newest first). With no term (`ARGV[1]` empty: the
/// grant's answer never came) the term is the token of the exclusive
/// grant `x`, if grant `ARGV[2]` still holds it. KEYS: r x. Returns 1 if
/// it removed the entry.
const WITHDRAW_TERM: &str = r"
local r, x = KEYS[1], KEYS[2]
local term, id, record = ARGV[1], ARGV[2], ARGV[3]
if term == '' then
  local v = redis.call('GET', x)
  if not v or string.sub(v, 1, 32) ~= id then return 0 end
  term = string.match(string.sub(v, 34), '^(%d+)')
  if not term then return 0 end
end
local entries = redis.call('LRANGE', r, 0, -1)
for i, entry in ipairs(entries) do
  local t, previous, rest = string.match(entry, '^(%d+):(%d*):(.*)$')
  if t == term then
    if rest ~= record then return 0 end
    if i > 1 then
      local n, _, after = string.match(entries[i - 1], '^(%d+):(%d*):(.*)$')
      if n then redis.call('LSET', r, i - 2, n .. ':' .. previous .. ':' .. after) end
    end
    redis.call('LREM', r, 1, entry)
    return 1
  end
end
return 0
";

/// `COUNTER_TTL` (how long a name's token counter and record of terms
/// outlive its latest grant: the backend's `token_keep`, in ms, as text)
/// and `MAX_READERS`, as locals at the start of every script that writes
/// the token counter: written into the text rather than sent as arguments,
/// each of which a script call copies in. A backend with another keep has
/// scripts of its own (see [`CounterScripts`]).
fn constants(keep: Duration) -> String {
    format!(
        "local COUNTER_TTL, MAX_READERS = '{}', {}\n",
        keep.as_millis(),
        MAX_PERMITS
    )
}

/// The acquire script's parts, in order: its common path first, then the
/// helpers the rest uses.
const ACQUIRE_PARTS: [&str; 9] = [
    ABSTAIN,
    ACQUIRE_FREE,
    CLOCK,
    INT,
    PRUNE,
    EXPIRE_WITH_LAST,
    FIRST_LEFT,
    NEXT_TOKEN,
    ACQUIRE,
];

/// The scripts that write a name's token counter, with the keep of the
/// backend's `token_keep` written in (see [`constants`]).
pub(crate) struct CounterScripts {
    pub(crate) acquire: Script,
    pub(crate) campaign: Script,
    pub(crate) hand_over: Script,
    pub(crate) raise: Script,
    pub(crate) mend: Script,
    pub(crate) resume: Script,
}

/// The counter scripts of the default keep, compiled once per process.
static DEFAULT_COUNTER_SCRIPTS: LazyLock<Arc<CounterScripts>> =
    LazyLock::new(|| Arc::new(CounterScripts::compile(DEFAULT_TOKEN_KEEP)));

impl CounterScripts {
    /// The scripts for a keep of `keep`: the process's shared ones for the
    /// default, compiled anew (their SHAs computed) for any other.
    pub(crate) fn keeping(keep: Duration) -> Arc<Self> {
        if keep == DEFAULT_TOKEN_KEEP {
            return Arc::clone(&DEFAULT_COUNTER_SCRIPTS);
        }
        Arc::new(Self::compile(keep))
    }

    fn compile(keep: Duration) -> Self {
        let constants = constants(keep);
        let of = |parts: &[&str]| Script::new(&parts.concat());
        Self {
            acquire: of(&[&constants, &ACQUIRE_PARTS.concat()]),
            campaign: of(&[
                &constants,
                "local function attempt()",
                &ACQUIRE_PARTS.concat(),
                "end",
                &campaign_epilogue(),
            ]),
            hand_over: of(&[&constants, CLOCK, INT, NEXT_TOKEN, HAND_OVER]),
            raise: of(&[&constants, INT, OWNS, RAISE]),
            mend: of(&[&constants, CLOCK, INT, PRUNE, EXPIRE_WITH_LAST, MEND]),
            resume: of(&[&constants, CLOCK, INT, EXPIRE_WITH_LAST, RESUME]),
        }
    }
}

/// Every other script, compiled once (its SHA computed) per process.
pub(crate) struct Scripts {
    pub(crate) extend: Script,
    pub(crate) release: Script,
    pub(crate) end_wait: Script,
    pub(crate) announce: Script,
    pub(crate) force_release: Script,
    pub(crate) inspect: Script,
    pub(crate) waiters: Script,
    pub(crate) terms: Script,
    pub(crate) withdraw_term: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    // A script's text is its parts in order: the helpers it uses before
    // the code that calls them.
    let of = |parts: &[&str]| Script::new(&parts.concat());
    Scripts {
        extend: of(&[CLOCK, INT, EXPIRE_WITH_LAST, OWNS, EXTEND]),
        release: of(&[
            RELEASE_EXCLUSIVE,
            CLOCK,
            INT,
            EXPIRE_WITH_LAST,
            OWNS,
            REMEMBER,
            ANSWERED,
            RELEASE,
        ]),
        end_wait: of(&[END_WAIT]),
        announce: of(&[ANNOUNCE]),
        force_release: of(&[
            CLOCK,
            INT,
            EXPIRE_WITH_LAST,
            REMEMBER,
            ANSWERED,
            FORCE_RELEASE,
        ]),
        inspect: of(&[CLOCK, INT, INSPECT]),
        waiters: of(&[CLOCK, INT, WAITERS]),
        terms: of(&[TERMS]),
        withdraw_term: of(&[WITHDRAW_TERM]),
    }
});
