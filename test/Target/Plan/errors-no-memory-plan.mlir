// The emitter needs the per-rank program (tp-partition) with planned memory
// (tp-plan-memory); without them it says which pass is missing.
// RUN: not tpc-opt %s -o %t.tpplan 2>&1 | FileCheck %s --check-prefix=PARTITION
// RUN: test ! -e %t.tpplan
// PARTITION: error: plan: run tp-partition before emitting a plan
// RUN: not tpc-opt %s --tp-partition -o %t.tpplan 2>&1 | FileCheck %s --check-prefix=MEMORY
// RUN: test ! -e %t.tpplan
// MEMORY: error: 'func.func' op plan: run tp-plan-memory before emitting a plan
func.func @forward(%x: tensor<4xf32> {tp.param = "x", tp.init = "zeros"}) -> tensor<4xf32> {
  %0 = tp.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
