"""profile_check.py TRACE.json TABLE.txt PROGRAM RUNS — checks a profile of kiln run --profile /
KILN_PROFILE: the trace is JSON in the trace-event format, it holds RUNS run events of
PROGRAM ("predict" or "train_step") and, for each, one complete event per step of the
program (the step count read from the table's header), every step in order within its run;
and the table's shares add up to 100% +- 1 when it lists every step. Prints what is wrong
and exits 1; exits 0 when all holds."""
import json
import re
import sys

trace, table, program, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
errors = []
doc = json.load(open(trace))
events = doc.get("traceEvents")
if not isinstance(events, list):
    sys.exit("no traceEvents list")
for e in events:
    if e.get("ph") not in ("X", "M"):
        errors.append(f"event with phase {e.get('ph')!r}")
    if e.get("ph") == "X" and not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
                                   and e["dur"] >= 0):
        errors.append(f"event without ts/dur: {e}")
run_events = sorted((e for e in events if e.get("cat") == "run" and e.get("name") == program), key=lambda e: e["ts"])
steps = sorted((e for e in events if e.get("cat") in ("forward", "backward", "update", "fused")
                and e["args"]["program"] == program), key=lambda e: e["ts"])
head = re.search(rf"kiln profile: {program}, (\d+) runs, .*?, (\d+) steps", open(table).read())
if not head:
    sys.exit(f"no table header for {program} in {table}")
nruns, nsteps = int(head.group(1)), int(head.group(2))
if nruns != runs or len(run_events) != runs:
    errors.append(f"{runs} runs wanted: the table says {nruns}, the trace has {len(run_events)}")
if len(steps) != runs * nsteps:
    errors.append(f"{runs} x {nsteps} step events wanted, the trace has {len(steps)}")
for r, run in enumerate(run_events):
    inside = [e for e in steps if run["ts"] - 1e-3 <= e["ts"] <= run["ts"] + run["dur"] + 1e-3]
    order = [e["args"]["step"] for e in inside]
    if order != list(range(nsteps)):
        errors.append(f"run {r}: steps {order[:8]}... not 0..{nsteps - 1} in order")
    for e in inside:
        if not e["args"].get("op") or "out" not in e["args"]:
            errors.append(f"step event without op or shapes: {e}")
            break
# The table: rows after the column header until a blank or "..." line.
lines = open(table).read().splitlines()
at = next(i for i, l in enumerate(lines) if re.match(rf"kiln profile: {program},", l))
rows = []
for l in lines[at + 2:]:
    m = re.match(r"\s+(\d+)\s.*?\s(\d+\.\d)%", l)
    if not m:
        break
    rows.append(float(m.group(2)))
if len(rows) == nsteps and abs(sum(rows) - 100.0) > 1.0:
    errors.append(f"the shares add up to {sum(rows):.1f}%")
if len(rows) != min(nsteps, 20):
    errors.append(f"the table lists {len(rows)} steps, want {min(nsteps, 20)}")
for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
