# -*- Python -*-
import os
import shutil
import subprocess
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "TPC"
# RUN lines go through /bin/sh so that tests can check exact exit codes.
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "json-query.py", "rss-ratio.py", "pipeline-estimate.py", "runtime", "fuzz", "Inputs"]

config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tpc_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"
config.substitutions.append(("%tpc_src_root", config.tpc_src_root))
# Tests read JSON (metrics, manifests, plan dumps) with a JSON parser.
config.substitutions.append(
    ("%json", sys.executable + " " + os.path.join(config.tpc_src_root, "test", "json-query.py")))
# mode=auto's estimate of a pipelined choice against its op-level replay.
config.substitutions.append(
    ("%pipeline_estimate", sys.executable + " " + os.path.join(config.tpc_src_root, "test", "pipeline-estimate.py")))
# Memory growth as a ratio of two commands' peak RSS.
config.substitutions.append(
    ("%rss_ratio", sys.executable + " " + os.path.join(config.tpc_src_root, "test", "rss-ratio.py")))
config.environment["OMPI_MCA_btl_base_warn_component_unused"] = "0"

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.tpc_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(
    ["tpc-opt", "tpc-import", "tp-run", "tp-sched", "tpc-tokenize"], tool_dirs)

# A visible NVIDIA GPU: tests of what tp-run does without one do not apply.
if shutil.which("nvidia-smi") and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0:
    config.available_features.add("gpu")
