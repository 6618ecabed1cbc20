#!/usr/bin/env python3
"""Attributes a CPU profile of ctxd to the named stages of a turn.

Reads `perf script` output (samples with call chains, from `perf record --call-graph
dwarf -p <ctxd pid>`) on standard input and prints, per stage, its share of ctxd's
samples and, given `--us-per-turn` (ctxd's CPU per turn from the load bench's same run),
its µs per turn, as a Markdown table.

A sample belongs to the stage of the innermost frame of its stack (walking from the
leaf towards the root) that matches a stage's rule; frames that match no rule
(allocation, memcpy, the standard library, the kernel's syscall paths) are charged to
the stage that called them. A sample of the trace writer's thread is `trace writing`
whatever its frames. Samples whose stack matches nothing are `runtime and scheduling`
when they are inside the async runtimes' or the kernel's scheduling code, else `other`.

    perf record -F 499 -e cpu-clock --call-graph dwarf,16384 -p PID -o perf.data -- sleep 10
    perf script -i perf.data --no-inline -F comm,tid,ip,sym | \\
        python3 benches/load/stages.py --us-per-turn 230
"""

import argparse
import re
import sys
from collections import Counter

# Stage rules, in the order they are tried on each frame. The first rule whose pattern
# matches the innermost matching frame names the stage.
STAGES = [
    ("metrics", r"ctxd::telemetry|metrics_exporter_prometheus|metrics::(recorder|handles|counter|histogram|gauge)|metrics_util"),
    ("bounds and secret scanning", r"ctxd::(secrets|bounds)|aho_corasick|regex_automata|regex::"),
    ("parsing provider answers", r"ctxd::providers::http::.*(parse|read_body|read_bounded)|ctxd::providers::.*parse_lookup|ctxd::contract::wire"),
    ("trace capture", r"ctxd::turn::capture|ctxd::trace::(record|store::codec|store::seal)|ctxd::digest::keyed|ctxd::trace::writer::.*(enqueue|send|queue|reserve|room)|zstd|ZSTD_|chacha|poly1305|crossbeam_channel"),
    ("kernel and rendering", r"ctxd::kernel|ctxd::turn::.*assemble|ctxd::handles"),
    ("response serialisation", r"ctxd::turn::respond|ctxd::api::.*(respond|json_response|envelope|turn_answer)|serialize_turn|TurnResponse.*[sS]erialize|ctxd::contract::turn::.*Serialize for"),
    ("gating", r"ctxd::gate|ctxd::turn::plan"),
    ("admission (gate, breaker, cache)", r"ctxd::actors::provider::.*Gate|ProviderGate|ctxd::resilience"),
    ("upstream I/O (provider HTTP calls)", r"ctxd::providers::http|ctxd::providers::endpoint|reqwest::|hyper::client|hyper::proto|hyper_util::client|hyper::body|h2::|rustls::"),
    ("auth", r"ctxd::api::tenant|subtle::"),
    ("HTTP in (actix-web, parsing the request)", r"ctxd::api|actix_http|actix_web|actix_server|actix_router|actix_codec|ctxd::contract::turn|serde_path_to_error"),
    ("coordinator (turn bookkeeping, fan-out)", r"ctxd::actors::coordinator|ctxd::turn|ctxd::outcome|actix::"),
]
SCHEDULING = re.compile(
    r"tokio::runtime|tokio::park|mio::|epoll|futex|schedule|__switch_to|finish_task_switch|"
    r"do_idle|cpuidle|try_to_wake_up|entry_SYSCALL|syscall_exit|std::thread|start_thread|clone3"
)
COMPILED = [(name, re.compile(pattern)) for name, pattern in STAGES]
WRITER_THREAD = "ctxd-trace-wri"  # comm is cut to 15 bytes


def stage_of(comm, frames):
    if comm.startswith(WRITER_THREAD):
        return "trace writing (writer thread)"
    for frame in frames:
        for name, pattern in COMPILED:
            if pattern.search(frame):
                return name
    if any(SCHEDULING.search(frame) for frame in frames):
        return "runtime and scheduling"
    return "other"


def samples(lines):
    """Yields (comm, [frames leaf first]) per sample of `perf script` output."""
    comm, frames = None, []
    for line in lines:
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
            continue
        if not line[0].isspace():
            if comm is not None:
                yield comm, frames
            # "comm tid ..." — the comm may hold spaces; the tid is the first number.
            match = re.match(r"^(.*?)\s+(\d+)(?:/\d+)?\s", line + " ")
            comm, frames = (match.group(1) if match else line.split()[0]), []
        else:
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
    if comm is not None:
        yield comm, frames


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--us-per-turn", type=float, help="ctxd CPU µs per turn in the same run")
    args = parser.parse_args()
    counts = Counter()
    total = 0
    for comm, frames in samples(sys.stdin):
        counts[stage_of(comm, frames)] += 1
        total += 1
    if total == 0:
        sys.exit("no samples on standard input")
    print(f"{total} samples of ctxd\n")
    header = "| stage | share of ctxd's CPU |"
    rule = "|---|---:|"
    if args.us_per_turn:
        header += " µs per turn |"
        rule += "---:|"
    print(header)
    print(rule)
    for name, count in counts.most_common():
        row = f"| {name} | {100 * count / total:.1f} % |"
        if args.us_per_turn:
            row += f" {args.us_per_turn * count / total:.1f} |"
        print(row)


if __name__ == "__main__":
    main()
