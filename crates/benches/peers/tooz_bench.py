"""The Python peer of distlock's memcached benchmarks: tooz's memcached lock.

Run by distlock-bench (crates/benches), never by hand, with one of:

    tooz_bench.py versions
    tooz_bench.py uncontended --url memcached://HOST:PORT --lock NAME --seconds S
    tooz_bench.py contended --url memcached://HOST:PORT --lock NAME --threads T
                  --process P --start-ns NS --until-ns NS
                  [--rounds [--work-seconds W]]

`contended` runs T threads sharing one coordinator (as distlock's workers
share one client), each taking the lock with tooz's own blocking acquire
and releasing it at once: over and over until the window ends, or, with
--rounds, once per round, a round starting at each `go` line on standard
input and ending with {"round_done": N}. With --work-seconds W, each
thread holds the lock for W seconds (a sleep, standing for the work a lock
protects) before releasing it; its release time is read after the sleep,
right before the release call. It then prints one JSON line per hold,
{"hold": {...}}, in the format distlock's workers use, and {"errors": N}.
Times are the wall clock (time.time_ns), which every process on the
machine shares.
"""

import argparse
import importlib.metadata
import json
import platform
import sys
import threading
import time
import uuid


def versions(_args):
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "tooz": importlib.metadata.version("tooz"),
                "pymemcache": importlib.metadata.version("pymemcache"),
            }
        )
    )


def coordinator(url):
    from tooz import coordination

    member = ("distlock-bench-" + uuid.uuid4().hex).encode()
    coord = coordination.get_coordinator(url, member)
    coord.start(start_heart=False)
    return coord


def uncontended(args):
    coord = coordinator(args.url)
    lock = coord.get_lock(args.lock.encode())
    cycles = 0
    started = time.perf_counter()
    deadline = started + args.seconds
    while time.perf_counter() < deadline:
        if not lock.acquire(blocking=False):
            sys.exit("an uncontended lock was held")
        if not lock.release():
            sys.exit("an uncontended lock was lost before its release")
        cycles += 1
    elapsed = time.perf_counter() - started
    coord.stop()
    print(json.dumps({"cycles": cycles, "seconds": elapsed}))


def contended(args):
    coord = coordinator(args.url)
    until_ns = args.until_ns
    holds = []
    errors = [0]
    guard = threading.Lock()

    def task(index, round_no, once):
        lock = coord.get_lock(args.lock.encode())
        mine = []
        failed = 0
        while True:
            left = (until_ns - time.time_ns()) / 1e9
            if left <= 0:
                break
            try:
                # tooz's own waiting: retries with tenacity's
                # wait_exponential(max=1) until `left` seconds have passed.
                if not lock.acquire(blocking=left):
                    break
            except Exception:  # a RetryError at the end of the wait, or a failure
                if time.time_ns() >= until_ns:
                    break
                failed += 1
                continue
            acquired_at_ns = time.time_ns()
            if args.work_seconds > 0:
                time.sleep(args.work_seconds)
            released_at_ns = time.time_ns()
            try:
                lock.release()
            except Exception:
                failed += 1
            mine.append(
                {
                    "acquired_at_ns": acquired_at_ns,
                    "released_at_ns": released_at_ns,
                    "process": args.process,
                    "task": index,
                    "round": round_no,
                }
            )
            if once:
                break
        with guard:
            holds.extend(mine)
            errors[0] += failed

    def run(round_no, once):
        threads = [
            threading.Thread(target=task, args=(i, round_no, once))
            for i in range(args.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    out = sys.stdout
    if args.rounds:
        round_no = 0
        for line in sys.stdin:
            if line.strip() != "go":
                break
            round_no += 1
            run(round_no, True)
            out.write(json.dumps({"round_done": round_no}) + "\n")
            out.flush()
    else:
        pause = args.start_ns / 1e9 - time.time()
        if pause > 0:
            time.sleep(pause)
        run(0, False)
    coord.stop()
    for hold in holds:
        out.write(json.dumps({"hold": hold}) + "\n")
    out.write(json.dumps({"errors": errors[0]}) + "\n")
    out.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("versions")
    u = sub.add_parser("uncontended")
    u.add_argument("--url", required=True)
    u.add_argument("--lock", required=True)
    u.add_argument("--seconds", type=float, required=True)
    c = sub.add_parser("contended")
    c.add_argument("--url", required=True)
    c.add_argument("--lock", required=True)
    c.add_argument("--threads", type=int, required=True)
    c.add_argument("--process", type=int, required=True)
    c.add_argument("--start-ns", type=int, required=True)
    c.add_argument("--until-ns", type=int, required=True)
    c.add_argument("--rounds", action="store_true")
    c.add_argument("--work-seconds", type=float, default=0.0)
    args = parser.parse_args()
    {"versions": versions, "uncontended": uncontended, "contended": contended}[args.mode](args)


if __name__ == "__main__":
    main()
