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
