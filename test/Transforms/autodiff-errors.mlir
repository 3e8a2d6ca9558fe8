// RUN: tpc-opt %s -split-input-file -verify-diagnostics --tp-autodiff
// remat=sometimes: test/tpc-opt/options.mlir.

// expected-error @below {{tp-autodiff: the module has no @loss}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// expected-error @below {{tp-autodiff: @loss must return one scalar loss}}
func.func @loss(%x: tensor<4xf32> {tp.param = "x", tp.init = "zeros"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Second-order differentiation is not supported.
func.func @loss(%x: tensor<4x8xf32> {tp.param = "x", tp.init = "zeros"},
                %targets: tensor<4xi32> {tp.input = "targets"}) -> tensor<f32> {
  // expected-error @below {{tp-autodiff: no vector-Jacobian product for this op}}
  %g = tp.gelu_grad %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = tp.cross_entropy %g, %targets : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// An attention's logsumexp is a statistic for its gradient, not a value to
// differentiate.
func.func @loss(%q: tensor<2x8x4xf32> {tp.param = "q", tp.init = "zeros"}) -> tensor<f32> {
  // expected-error @+1 {{tp-autodiff: the loss must not depend on tp.attention's logsumexp}}
  %o, %lse = tp.attention %q, %q, %q {causal} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8xf32>)
  %l = tp.reduce_sum %lse {dims = array<i64: 0, 1>} : (tensor<2x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
