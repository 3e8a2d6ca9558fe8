"""The tpc package against tp-run: the same plan, data and settings give the
same losses and parameters bit for bit, and the same generated tokens; bad
arguments raise with the tools' one-line messages."""

import json

import numpy as np
import pytest

from conftest import MODEL_CONFIG, mpirun, tool, tpc, worker

STEPS = 6


@pytest.fixture(scope="module")
def training_plan(tmp_path_factory):
    """1D over 2 ranks, with AdamW settings that differ from the defaults (an
    option the package dropped would change the numbers)."""
    module = tpc.import_config(MODEL_CONFIG, batch=2, seq=16)
    plan = tpc.compile(module, mode="1d", grid=[2], beta2=0.99,
                       weight_decay=0.05)
    path = tmp_path_factory.mktemp("plan") / "train.tpplan"
    plan.save(path)
    return path


def test_compile_reports_and_describes_the_plan(training_plan):
    plan = tpc.Plan.load(training_plan)
    assert plan.grid == [2]
    assert plan.programs == ["forward", "loss", "gradients", "train_step"]
    assert plan.memory["train_step"] > 0
    module = tpc.import_config(MODEL_CONFIG, batch=2, seq=16)
    compiled = tpc.compile(module, mode="1d", grid=2)
    assert any(line.startswith("@train_step communication per rank:")
               for line in compiled.report), compiled.report
    # In-process and tpc-opt compile the same plan.
    assert "tp.matmul" in str(module) or "tp." in str(module)


def test_two_rank_training_from_python_equals_tp_run(training_plan, token_file,
                                                     tmp_path):
    run = mpirun(2, [tool("tp-run"), "train", training_plan, "--data",
                     token_file, "--steps", STEPS, "--lr", "2e-3",
                     "--min-lr", "1e-4", "--warmup", "2", "--decay-steps",
                     STEPS + 2, "--clip", "0.5", "--device", "cpu",
                     "--metrics", tmp_path / "metrics.json", "--export",
                     tmp_path / "tp-run-export"])
    assert run.returncode == 0, run.stderr
    expected = [r["loss"] for r in
                json.loads((tmp_path / "metrics.json").read_text())["loss_curve"]]

    run = mpirun(2, worker("train_loop.py") + [
        training_plan, token_file, STEPS, tmp_path / "losses.json",
        tmp_path / "python-export"])
    assert run.returncode == 0, run.stderr
    got = json.loads((tmp_path / "losses.json").read_text())
    assert got["step"] == STEPS
    assert got["losses"] == expected  # bit for bit
    assert len(set(expected)) > 1
    assert ((tmp_path / "python-export" / "model.safetensors").read_bytes() ==
            (tmp_path / "tp-run-export" / "model.safetensors").read_bytes())


def test_torch_tensors_train_as_numpy_arrays_do(training_plan, token_file,
                                                tmp_path):
    pytest.importorskip("torch")
    runs = {}
    for kind in ("numpy", "torch"):
        run = mpirun(2, worker("train_loop.py") + [
            training_plan, token_file, 3, tmp_path / f"{kind}.json",
            tmp_path / f"{kind}-export"] + (["torch"] if kind == "torch" else []))
        assert run.returncode == 0, run.stderr
        runs[kind] = json.loads((tmp_path / f"{kind}.json").read_text())
    assert runs["torch"]["losses"] == runs["numpy"]["losses"]


def test_generation_equals_tp_run(tmp_path):
    module = tpc.import_config(MODEL_CONFIG, batch=2, seq=8, kv_cache=32)
    plan = tmp_path / "generate.tpplan"
    tpc.compile(module, mode="1d", grid=[2], train=False).save(plan)
    expected = {}
    for name, flags in (
            ("sampled", ["--prompt-ids", "5,6,7", "--max-new-tokens", "12",
                         "--temperature", "0.9", "--top-k", "30", "--seed",
                         "11"]),
            ("greedy", ["--prompt-ids", "40,41,42,43", "--max-new-tokens",
                        "6"])):
        metrics = tmp_path / f"{name}.json"
        run = mpirun(2, [tool("tp-run"), "generate", plan, "--device", "cpu",
                         "--ignore-eos", "--metrics", metrics] + flags)
        assert run.returncode == 0, run.stderr
        expected[name] = [json.loads(metrics.read_text())["generated_ids"]]
    run = mpirun(2, worker("generate.py") + [plan, tmp_path / "python.json"])
    assert run.returncode == 0, run.stderr
    got = json.loads((tmp_path / "python.json").read_text())
    assert got == expected
    assert len(got["sampled"][0]) == 12


def test_ranks_given_different_batches_all_raise(training_plan):
    run = mpirun(2, worker("disagree.py") + [training_plan], timeout=60)
    assert run.returncode != 0
    for rank in (0, 1):
        assert (f"rank {rank}: ValueError: the ranks passed different tokens"
                in run.stdout), run.stdout + run.stderr


def test_one_rank_session_trains_evaluates_and_checkpoints(tmp_path):
    module = tpc.import_config(MODEL_CONFIG, batch=2, seq=8)
    session = tpc.Session(tpc.compile(module), device="cpu")
    assert session.tokens_shape == [2, 8]
    assert session.vocabulary_size == 256
    session.configure_training(steps=4, lr=1e-3, warmup=1)
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, size=(4, 2, 9), dtype=np.int64)
    losses = [session.train_step(d[:, :-1], d[:, 1:]) for d in data[:2]]
    checkpoint = session.save_checkpoint(tmp_path / "ckpt")
    assert checkpoint.endswith("step-00000002")
    held_out = session.evaluate(data[3, :, :-1], data[3, :, 1:])
    logits = session.evaluate(data[3, :, :-1], program="forward")
    assert logits.shape == (2, 8, 256)
    rest = [session.train_step(d[:, :-1], d[:, 1:]) for d in data[2:]]

    resumed = tpc.Session(tpc.compile(module), device="cpu")
    resumed.configure_training(steps=4, lr=1e-3, warmup=1)
    assert resumed.resume(tmp_path / "ckpt") == 2
    assert resumed.evaluate(data[3, :, :-1], data[3, :, 1:]) == held_out
    assert [resumed.train_step(d[:, :-1], d[:, 1:]) for d in data[2:]] == rest
    assert np.isfinite(losses).all()


def test_bad_arguments_raise_with_one_line_messages(tmp_path):
    with pytest.raises(RuntimeError, match="nonexistent.json"):
        tpc.import_config(tmp_path / "nonexistent.json", batch=2, seq=8)
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        tpc.import_config(MODEL_CONFIG, batch=0, seq=8)
    with pytest.raises(ValueError, match="not a directory"):
        tpc.import_hf(tmp_path / "missing", batch=2, seq=8)
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "gpt2", "vocab_size": -3}')
    with pytest.raises(RuntimeError, match="vocab_size"):
        tpc.import_hf(tmp_path, batch=2, seq=8)
    module = tpc.import_config(MODEL_CONFIG, batch=2, seq=8)
    with pytest.raises(ValueError, match="sideways"):
        tpc.compile(module, mode="sideways")
    with pytest.raises(ValueError, match="grid"):
        tpc.compile(module, grid=[2])  # a grid without a mode
    with pytest.raises(TypeError):
        tpc.compile("not a module")
    with pytest.raises(RuntimeError, match="has 2 ranks, but 1 is running"):
        tpc.Session(tpc.compile(module, mode="1d", grid=[2]), device="cpu")
    with pytest.raises(ValueError, match="tpu"):
        tpc.Session(tpc.compile(module), device="tpu")

    session = tpc.Session(tpc.compile(module), device="cpu")
    tokens = np.zeros((2, 8), dtype=np.int32)
    with pytest.raises(ValueError, match="configure_training"):
        session.train_step(tokens, tokens)
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        session.configure_training(steps=0)
    with pytest.raises(ValueError, match="learning rate"):
        session.configure_training(steps=3, lr=-1.0)
    with pytest.raises(Exception, match="sideways"):
        session.configure_training(steps=3, rebalance="sideways")
    session.configure_training(steps=3)
    with pytest.raises(ValueError, match=r"tokens has shape \[2, 7\]; the plan "
                                         r"takes \[2, 8\]"):
        session.train_step(tokens[:, :7], tokens[:, :7])
    with pytest.raises(RuntimeError, match="outside the vocabulary of 256"):
        session.train_step(tokens + 300, tokens)
    with pytest.raises(ValueError, match="integer token ids"):
        session.train_step(tokens.astype(np.float32), tokens)
    assert session.step == 0  # nothing ran
    with pytest.raises(ValueError, match="needs a train_step first"):
        session.save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="3 samples: the plan generates 2"):
        session.generate([[1], [2], [3]], max_new_tokens=2)
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        session.generate([[]], max_new_tokens=2)


def test_pip_install_gives_a_working_package(tmp_path):
    """`pip install .` into a fresh venv (this build's module, no network)."""
    import os
    import subprocess
    import sys

    from conftest import BUILD, REPO
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    venv], check=True)
    env = dict(os.environ, TPC_BUILD_DIR=str(BUILD))
    env.pop("PYTHONPATH", None)
    install = subprocess.run(
        [venv / "bin" / "pip", "install", "--no-build-isolation", "--no-deps",
         "--no-index", "-q", REPO], env=env, capture_output=True, text=True,
        timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    use = subprocess.run(
        [venv / "bin" / "python", "-c",
         "import tpc, sys; m = tpc.import_config(sys.argv[1], batch=2, seq=8);"
         "s = tpc.Session(tpc.compile(m), device='cpu');"
         "print(tpc.__file__, s.generate([[1, 2]], 3)[0])", MODEL_CONFIG],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert use.returncode == 0, use.stderr
    path, tokens = use.stdout.split(" ", 1)
    assert path.startswith(str(venv))
    assert len(json.loads(tokens)) == 3


def test_the_example_trains_from_a_python_loader(tmp_path):
    from conftest import REPO
    text = tmp_path / "text.txt"
    text.write_text("a tiny corpus for a tiny model, repeated. " * 40)
    run = mpirun(2, ["/usr/bin/python3", REPO / "examples" /
                     "train_from_python.py", "--steps", 3, "--batch", 2,
                     "--seq", 32, "--device", "cpu", "--plot",
                     tmp_path / "loss.png", text])
    assert run.returncode == 0, run.stderr
    assert "2 rank(s) on cpu" in run.stdout
    final = [line for line in run.stdout.splitlines()
             if line.startswith("step 3/3 | loss ")]
    assert final and 0 < float(final[0].split()[4]) < 10, run.stdout
