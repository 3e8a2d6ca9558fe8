// Parses, but fails verification. Used by ../malformed.mlir.
// (not a test on its own: lit.cfg.py excludes Inputs/)
func.func @f(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = tp.matmul %a, %b : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
