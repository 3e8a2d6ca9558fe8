// A module the plan cannot represent is an error on the offending op, exit
// code 1, and no plan file is left behind.
// RUN: rm -f %t.tpplan
// RUN: not tpc-opt %s --tp-pipeline="train=false" -o %t.tpplan 2>&1 | FileCheck %s
// RUN: test ! -e %t.tpplan
// CHECK: errors.mlir:[[@LINE+1]]:1: error: 'func.func' op plan: argument #0 needs tp.param, tp.cache or tp.input = "tokens" | "targets" | "positions" | "step" | "hyperparameters"
func.func @unnamed(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tp.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// A plan is one module: -split-input-file cannot write one.
// RUN: not tpc-opt %s -split-input-file --tp-pipeline="train=false" -o %t.tpplan 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: test ! -e %t.tpplan
// SPLIT: tpc-opt: error: -split-input-file cannot write a plan
