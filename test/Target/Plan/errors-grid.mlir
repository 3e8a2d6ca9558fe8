// Multi-rank plans need the partitioner (tensor parallelism, a later stage).
// RUN: not tpc-opt %s --tp-pipeline="train=false" -o %t.tpplan 2>&1 | FileCheck %s
// RUN: test ! -e %t.tpplan
// CHECK: error: plan: grid of 4 ranks, but only single-rank plans can be emitted so far
tp.grid @g [2, 2]
func.func @forward(%x: tensor<4xf32> {tp.param = "x", tp.init = "zeros"}) -> tensor<4xf32> {
  %0 = tp.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
