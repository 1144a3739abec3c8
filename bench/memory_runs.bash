# Shared by the benchmarks that check `megatron plan`'s memory against measured runs
# (bench/context_parallel.sh, bench/plan_validation_moe.sh); source it after setting ROOT.

# four_device_machine_file OUT_FILE: the 2 x 1 machine file with 4 devices on the node, for the
# memory plans of 4-process runs on the 2 cores (its times would not describe them; not used).
four_device_machine_file() {
  python3 - "$ROOT/examples/machines/cpu_dev_2x1.json" "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] += ", as 4 processes on one node (memory only)"
m["node"]["devices"] = 4
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
}

# write_measured_memory DIR LOG_GLOB JSON_NAME: DIR/JSON_NAME with, per run (DIR/<run>.log
# matching LOG_GLOB, its ranks' peak RSS in DIR/<run>.rss.*), the peak RSS per rank and rank 0's
# memory report after the last iteration; tests/unit/plan_validation_test.cpp reads these files
# from bench/plan_validation/.
write_measured_memory() {
  python3 - "$1" "$2" "$3" <<'PY'
import glob, json, os, re, sys
out, pattern, name = sys.argv[1:4]
runs = {}
for log in sorted(glob.glob(os.path.join(out, pattern))):
    run = os.path.basename(log)[:-4]
    rss = [float(open(f).read()) for f in sorted(glob.glob(os.path.join(out, run + ".rss.*")))]
    reports = re.findall(r"memory \(MB\) \| allocated: ([0-9.]+) \| max allocated: ([0-9.]+)",
                         open(log).read())
    runs[run] = {"peak_rss_kb": max(rss), "rank_rss_kb": rss,
                 "allocated_mb": float(reports[-1][0]) if reports else None,
                 "max_allocated_mb": float(reports[-1][1]) if reports else None}
with open(os.path.join(out, name), "w") as f:
    json.dump(runs, f, indent=1)
    f.write("\n")
PY
}
