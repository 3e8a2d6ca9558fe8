// One GPT-2 block (h 32, 4 heads, vocab 64, batch 2, seq 8) from tpc-import.
module attributes {tp.head_counts = {n_head = 4 : i64}, tp.model_type = "gpt2"} {
  func.func @loss(%arg0: tensor<64x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "transformer.wte.weight"}, %arg1: tensor<16x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "transformer.wpe.weight"}, %arg2: tensor<32xf32> {tp.init = "ones", tp.param = "transformer.h.0.ln_1.weight"}, %arg3: tensor<32xf32> {tp.init = "zeros", tp.param = "transformer.h.0.ln_1.bias"}, %arg4: tensor<32x3x32xf32> {tp.hf_shape = array<i64: 32, 96>, tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "transformer.h.0.attn.c_attn.weight"}, %arg5: tensor<3x32xf32> {tp.hf_shape = array<i64: 96>, tp.init = "zeros", tp.param = "transformer.h.0.attn.c_attn.bias"}, %arg6: tensor<32x32xf32> {tp.init = "normal", tp.init_std = 0.014142135623730949 : f64, tp.param = "transformer.h.0.attn.c_proj.weight"}, %arg7: tensor<32xf32> {tp.init = "zeros", tp.param = "transformer.h.0.attn.c_proj.bias"}, %arg8: tensor<32xf32> {tp.init = "ones", tp.param = "transformer.h.0.ln_2.weight"}, %arg9: tensor<32xf32> {tp.init = "zeros", tp.param = "transformer.h.0.ln_2.bias"}, %arg10: tensor<32x128xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "transformer.h.0.mlp.c_fc.weight"}, %arg11: tensor<128xf32> {tp.init = "zeros", tp.param = "transformer.h.0.mlp.c_fc.bias"}, %arg12: tensor<128x32xf32> {tp.init = "normal", tp.init_std = 0.014142135623730949 : f64, tp.param = "transformer.h.0.mlp.c_proj.weight"}, %arg13: tensor<32xf32> {tp.init = "zeros", tp.param = "transformer.h.0.mlp.c_proj.bias"}, %arg14: tensor<32xf32> {tp.init = "ones", tp.param = "transformer.ln_f.weight"}, %arg15: tensor<32xf32> {tp.init = "zeros", tp.param = "transformer.ln_f.bias"}, %arg16: tensor<2x8xi32> {tp.input = "tokens"}, %arg17: tensor<2x8xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
    %0 = tp.embedding %arg0, %arg16 : (tensor<64x32xf32>, tensor<2x8xi32>) -> tensor<2x8x32xf32>
    %1 = tp.slice %arg1 {offsets = array<i64: 0, 0>} : (tensor<16x32xf32>) -> tensor<8x32xf32>
    %2 = tp.add %0, %1 : (tensor<2x8x32xf32>, tensor<8x32xf32>) -> tensor<2x8x32xf32>
    %3 = tp.layer_norm %2, %arg2, %arg3 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %4 = tp.slice %arg4 {offsets = array<i64: 0, 0, 0>, tp.layer = 0 : i64} : (tensor<32x3x32xf32>) -> tensor<32x1x32xf32>
    %5 = tp.reshape %4 {tp.layer = 0 : i64} : (tensor<32x1x32xf32>) -> tensor<32x32xf32>
    %6 = tp.slice %arg5 {offsets = array<i64: 0, 0>, tp.layer = 0 : i64} : (tensor<3x32xf32>) -> tensor<1x32xf32>
    %7 = tp.reshape %6 {tp.layer = 0 : i64} : (tensor<1x32xf32>) -> tensor<32xf32>
    %8 = tp.matmul %3, %5 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %9 = tp.add %8, %7 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %10 = tp.reshape %9 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
    %11 = tp.transpose %10 {permutation = array<i64: 0, 2, 1, 3>, tp.layer = 0 : i64} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
    %12 = tp.slice %arg4 {offsets = array<i64: 0, 1, 0>, tp.layer = 0 : i64} : (tensor<32x3x32xf32>) -> tensor<32x1x32xf32>
    %13 = tp.reshape %12 {tp.layer = 0 : i64} : (tensor<32x1x32xf32>) -> tensor<32x32xf32>
    %14 = tp.slice %arg5 {offsets = array<i64: 1, 0>, tp.layer = 0 : i64} : (tensor<3x32xf32>) -> tensor<1x32xf32>
    %15 = tp.reshape %14 {tp.layer = 0 : i64} : (tensor<1x32xf32>) -> tensor<32xf32>
    %16 = tp.matmul %3, %13 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %17 = tp.add %16, %15 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %18 = tp.reshape %17 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
    %19 = tp.transpose %18 {permutation = array<i64: 0, 2, 1, 3>, tp.layer = 0 : i64} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
    %20 = tp.slice %arg4 {offsets = array<i64: 0, 2, 0>, tp.layer = 0 : i64} : (tensor<32x3x32xf32>) -> tensor<32x1x32xf32>
    %21 = tp.reshape %20 {tp.layer = 0 : i64} : (tensor<32x1x32xf32>) -> tensor<32x32xf32>
    %22 = tp.slice %arg5 {offsets = array<i64: 2, 0>, tp.layer = 0 : i64} : (tensor<3x32xf32>) -> tensor<1x32xf32>
    %23 = tp.reshape %22 {tp.layer = 0 : i64} : (tensor<1x32xf32>) -> tensor<32xf32>
    %24 = tp.matmul %3, %21 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %25 = tp.add %24, %23 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %26 = tp.reshape %25 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
    %27 = tp.transpose %26 {permutation = array<i64: 0, 2, 1, 3>, tp.layer = 0 : i64} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
    %28 = tp.matmul %11, %19 {alpha = 0.35355339059327373 : f64, tp.layer = 0 : i64, transpose_rhs} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    %29 = tp.softmax %28 {causal, tp.layer = 0 : i64} : tensor<2x4x8x8xf32>
    %30 = tp.matmul %29, %27 {tp.layer = 0 : i64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    %31 = tp.transpose %30 {permutation = array<i64: 0, 2, 1, 3>, tp.layer = 0 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
    %32 = tp.reshape %31 {tp.layer = 0 : i64} : (tensor<2x8x4x8xf32>) -> tensor<2x8x32xf32>
    %33 = tp.matmul %32, %arg6 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %34 = tp.add %33, %arg7 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %35 = tp.add %2, %34 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %36 = tp.layer_norm %35, %arg8, %arg9 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %37 = tp.matmul %36, %arg10 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32x128xf32>) -> tensor<2x8x128xf32>
    %38 = tp.add %37, %arg11 {tp.layer = 0 : i64} : (tensor<2x8x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
    %39 = tp.gelu %38 {tp.layer = 0 : i64} : tensor<2x8x128xf32>
    %40 = tp.matmul %39, %arg12 {tp.layer = 0 : i64} : (tensor<2x8x128xf32>, tensor<128x32xf32>) -> tensor<2x8x32xf32>
    %41 = tp.add %40, %arg13 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %42 = tp.add %35, %41 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %43 = tp.layer_norm %42, %arg14, %arg15 : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %44 = tp.matmul %43, %arg0 {transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    %45 = tp.cross_entropy %44, %arg17 : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %45 : tensor<f32>
  }
}

