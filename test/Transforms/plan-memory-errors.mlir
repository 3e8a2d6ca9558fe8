// RUN: tpc-opt %s -split-input-file -verify-diagnostics --tp-plan-memory

// The runtime keeps updates in their arguments' storage: an update that is
// not an in-place write of its argument would be lost, so it is an error.
// expected-error @+1 {{tp-plan-memory: result #0 updates argument #0 but is not an in-place update of it (the runtime updates arguments in their own storage)}}
func.func @update_not_in_place(%p: tensor<8xf32>) -> (tensor<8xf32> {tp.updates = 0 : i64}) {
  %0 = tp.scale %p, 2.0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
