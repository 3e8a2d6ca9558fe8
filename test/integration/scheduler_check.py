#!/usr/bin/env python3
"""Checks of a tp-sched run (test/integration/scheduler.sh), from its state file and the files its
segments wrote, never from tp-sched's own summaries:

  check STATE [--resized] [--failed=JOB:MESSAGE]...
                                 every job done, its segments a chain of steps, its final
                                 checkpoint's tokens the sum of its segments', the timeline drawn;
                                 with --resized, some job changed configuration between segments
  replay STATE BIN MPIEXEC WORK  each job's segments done again by hand (tpc-import at the
                                 segment's batch, tpc-opt for its ranks, mpirun tp-run resuming the
                                 last) end at the scheduled run's final weights and loss, bit for bit
  segments STATE JOB OUT         the job's --segments for training_reference.py (printed) and its
                                 loss curve over all segments (OUT)
"""
import json
import os
import subprocess
import sys


def fail(message):
    print(f"scheduler_check: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def load(state_dir):
    with open(os.path.join(state_dir, "state.json")) as f:
        state = json.load(f)
    if state.get("format") != "tpc-sched-state" or state.get("version") != 1:
        fail(f"{state_dir}/state.json is not a version-1 tp-sched state")
    return state


def done_segments(job):
    return [s for s in job["segments"] if s["status"] == "done"]


def latest_checkpoint(directory):
    with open(os.path.join(directory, "latest")) as f:
        return os.path.join(directory, f.read().strip())


def check(state_dir, resized, failed, stopped=False):
    state = load(state_dir)
    any_resize = False
    stops = []
    for job in state["jobs"]:
        name, spec = job["spec"]["name"], job["spec"]
        if name in failed:
            # Reported with tp-run's own error; its ranks went back to the pool.
            if job["status"] != "failed" or failed[name] not in job["error"]:
                fail(f"{name} is {job['status']} ({job['error']!r}), expected failed with "
                     f"{failed[name]!r}")
            print(f"{name}: failed as expected: {job['error']}")
            continue
        if job["status"] != "done":
            fail(f"{name} is {job['status']}: {job['error']}")
        segments = done_segments(job)
        step, tokens = 0, 0
        for previous, segment in zip([None] + segments, segments):
            if segment["first_step"] != step + 1:
                fail(f"{name}: segment {segment['index']} begins at step {segment['first_step']}, "
                     f"after step {step}")
            ranks, batch = segment["config"]
            if previous is not None and previous["config"] != segment["config"]:
                any_resize = True
            # The linear scaling rule, capped.
            lr = min(spec["max_lr"], spec["lr"] * batch / spec["batch"])
            if abs(segment["lr"] - lr) > 1e-12 * lr:
                fail(f"{name}: segment {segment['index']} ran at lr {segment['lr']}, expected {lr}")
            step = segment["last_step"]
            tokens += (segment["last_step"] - segment["first_step"] + 1) * batch * spec["seq"]
            if segment["last_step"] != segment["planned_last_step"]:
                # Only a stop the scheduler asked for ends a segment early.
                if not segment["stop_requested"] or \
                        not segment["first_step"] <= segment["last_step"] < segment["planned_last_step"]:
                    fail(f"{name}: segment {segment['index']} ran steps {segment['first_step']}-"
                         f"{segment['last_step']} of {segment['planned_last_step']}")
                stops.append(f"{name} {segment['index']} after step {segment['last_step']} "
                             f"of {segment['planned_last_step']}")
        checkpoint = latest_checkpoint(os.path.join(state_dir, "jobs", name, "checkpoints"))
        with open(os.path.join(checkpoint, "manifest.json")) as f:
            manifest = json.load(f)
        if manifest["step"] != step or manifest["tokens_seen"] != tokens:
            fail(f"{name}: final checkpoint at step {manifest['step']} with {manifest['tokens_seen']} "
                 f"tokens; its segments ran to step {step} over {tokens}")
        samples, bound = tokens // spec["seq"], spec.get("target_samples", spec.get("max_samples"))
        if "target_loss" in spec:
            # Stopped at the first segment whose last loss reached it (or at the bound).
            losses = [s["loss"] for s in segments]
            reached = [i for i, loss in enumerate(losses) if loss <= spec["target_loss"]]
            if (reached[:1] or [len(segments) - 1])[0] != len(segments) - 1 or \
                    (not reached and samples < bound):
                fail(f"{name}: segment losses {losses} against the target loss {spec['target_loss']}")
        elif samples < bound:
            fail(f"{name}: {samples} samples, short of its target {bound}")
        # Not a step more than the target needs: the last segment was cut to it.
        if samples - segments[-1]["config"][1] >= bound:
            fail(f"{name}: ran a step past its target")
        configs = ", ".join(f"{s['config'][0]}x{s['config'][1]}" for s in segments)
        print(f"{name}: {len(segments)} segments ({configs}), step {step}, "
              f"{tokens // spec['seq']} samples, loss {job['loss']}")
    with open(os.path.join(state_dir, "timeline.svg")) as f:
        svg = f.read()
    bars = svg.count('class="bar"')
    expected = sum(len(j["segments"]) for j in state["jobs"] if j["spec"]["name"] not in failed)
    if bars < expected:
        fail(f"timeline.svg draws {bars} bars for {expected} segments")
    if resized and not any_resize:
        fail("no job changed its configuration between segments")
    if stopped and not stops:
        fail("no segment was stopped mid-way")
    if stops:
        print("stopped mid-segment: " + "; ".join(stops))
    print(f"check: {len(state['jobs'])} jobs done, {expected} segments drawn"
          + (", with resizes" if any_resize else ""))


def replay(state_dir, bin_dir, mpiexec, work):
    state = load(state_dir)
    os.makedirs(work, exist_ok=True)
    for job in state["jobs"]:
        spec, name = job["spec"], job["spec"]["name"]
        if job["status"] != "done":
            continue
        checkpoints = os.path.join(work, name, "checkpoints")
        os.makedirs(os.path.join(work, name), exist_ok=True)
        loss = None
        for k, segment in enumerate(done_segments(job)):
            ranks, batch = segment["config"]
            module = os.path.join(work, name, f"b{batch}.mlir")
            plan = os.path.join(work, name, f"{ranks}x{batch}.tpplan")
            if not os.path.exists(plan):
                subprocess.run([f"{bin_dir}/tpc-import", spec["config"], "--batch", str(batch),
                                "--seq", str(spec["seq"]), "-o", module], check=True)
                options = f"mode=1d grid=1 dp={ranks} " + spec.get("pipeline", "")
                subprocess.run([f"{bin_dir}/tpc-opt", module, f"--tp-pipeline={options.strip()}",
                                "-o", plan], check=True, stderr=subprocess.DEVNULL)
            lr = repr(min(spec["max_lr"], spec["lr"] * batch / spec["batch"]))
            metrics = os.path.join(work, name, f"segment-{k}.json")
            command = [mpiexec, "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
                       f"{bin_dir}/tp-run", plan, "--data", spec["data"], "--threads", "1",
                       "--steps", str(segment["last_step"]), "--lr", lr, "--min-lr", lr,
                       "--warmup", str(spec["warmup"]), "--clip", str(spec["clip"]),
                       "--checkpoint-dir", checkpoints, "--metrics", metrics]
            command += ["--resume", checkpoints] if k else ["--weights", spec["weights"]]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            with open(metrics) as f:
                loss = json.load(f)["loss_curve"][-1]["loss"]
        scheduled = latest_checkpoint(os.path.join(state_dir, "jobs", name, "checkpoints"))
        by_hand = latest_checkpoint(checkpoints)
        with open(os.path.join(scheduled, "state.safetensors"), "rb") as a, \
                open(os.path.join(by_hand, "state.safetensors"), "rb") as b:
            if a.read() != b.read():
                fail(f"{name}: the replay's final weights and moments differ from the scheduled run's")
        if loss != job["loss"]:
            fail(f"{name}: the replay's final loss {loss!r} is not the scheduled run's {job['loss']!r}")
        print(f"replay {name}: final loss {loss!r} and checkpoint bit-identical")


def segments(state_dir, name, out):
    state = load(state_dir)
    job = next((j for j in state["jobs"] if j["spec"]["name"] == name), None)
    if job is None:
        fail(f"no job {name}")
    curve, parts = [], []
    for segment in done_segments(job):
        with open(os.path.join(state_dir, "jobs", name, f"segment-{segment['index']}.json")) as f:
            records = json.load(f)["loss_curve"]
        curve += [r for r in records if r["step"] >= segment["first_step"]]
        parts.append(f"{segment['last_step']}:{segment['config'][1]}:{segment['lr']!r}")
    with open(out, "w") as f:
        json.dump({"loss_curve": curve}, f)
    print(",".join(parts))


def main(argv):
    if len(argv) >= 2 and argv[0] == "check":
        failed = dict(a[len("--failed="):].split(":", 1) for a in argv[2:] if a.startswith("--failed="))
        check(argv[1], "--resized" in argv[2:], failed, "--stopped" in argv[2:])
    elif len(argv) == 5 and argv[0] == "replay":
        replay(*argv[1:])
    elif len(argv) == 4 and argv[0] == "segments":
        segments(*argv[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
