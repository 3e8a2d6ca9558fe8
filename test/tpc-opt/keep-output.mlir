// A failing run never deletes or truncates a user's file: tpc-opt writes a
// temporary file beside the output and renames it over the output only on
// success, for .mlir and .tpplan outputs, and also when the output is the
// input itself.
// RUN: rm -rf %t && mkdir -p %t
// RUN: echo "old output" > %t/out.mlir
// RUN: echo "old plan" > %t/out.tpplan
// RUN: cp %tpc_src_root/test/tpc-opt/Inputs/bad-verifier.mlir %t/self.mlir

// A verifier error, a pass error, and the input as its own output.
// RUN: not tpc-opt %tpc_src_root/test/tpc-opt/Inputs/bad-verifier.mlir -o %t/out.mlir 2>/dev/null
// RUN: FileCheck %s --check-prefix=OLD < %t/out.mlir
// RUN: not tpc-opt %tpc_src_root/test/Transforms/Inputs/gpt2-block.mlir --tp-pipeline="mode=1d grid=3" -o %t/out.mlir 2>/dev/null
// RUN: FileCheck %s --check-prefix=OLD < %t/out.mlir
// RUN: not tpc-opt %tpc_src_root/test/Transforms/Inputs/gpt2-block.mlir --tp-pipeline="mode=1d grid=3" -o %t/out.tpplan 2>/dev/null
// RUN: FileCheck %s --check-prefix=OLDPLAN < %t/out.tpplan
// RUN: not tpc-opt %tpc_src_root/test/tpc-opt/Inputs/bad-verifier.mlir -o %t/out.tpplan 2>/dev/null
// RUN: FileCheck %s --check-prefix=OLDPLAN < %t/out.tpplan
// RUN: not tpc-opt %t/self.mlir -o %t/self.mlir 2>/dev/null
// RUN: cmp %t/self.mlir %tpc_src_root/test/tpc-opt/Inputs/bad-verifier.mlir

// Success replaces the file; no temporary file is left either way.
// RUN: tpc-opt %s -o %t/out.mlir
// RUN: FileCheck %s --check-prefix=NEW < %t/out.mlir
// RUN: ls %t | FileCheck %s --check-prefix=FILES --implicit-check-not=tmp --implicit-check-not=temp

// OLD: old output
// OLDPLAN: old plan
// NEW: func.func @kept
// FILES: out.mlir
// FILES: out.tpplan
// FILES: self.mlir
func.func @kept() {
  return
}
