// Every attribute of an op reaches the plan step's field of the same name;
// one the plan has no field for is an error on the op, not silently dropped.
// RUN: rm -f %t.tpplan
// RUN: not tpc-opt %s --tp-pipeline="train=false" -o %t.tpplan 2>&1 | FileCheck %s
// RUN: test ! -e %t.tpplan
func.func @forward(%x: tensor<4xf32> {tp.param = "x", tp.init = "zeros"}) -> (tensor<4xf32> {tp.output = "y"}) {
  // CHECK: errors-step-fields.mlir:[[@LINE+1]]:8: error: 'tp.gelu' op plan: attribute 'approximate' has no field in a plan step
  %0 = tp.gelu %x {approximate = "none"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
