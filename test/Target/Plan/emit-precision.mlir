// tp-pipeline's precision reaches the plan (1.10). bf16 is mixed precision:
// activations are BF16 tensors, parameters stay F32 masters read through
// Convert steps (their bf16 copies), and the products' operands are bf16
// tensors, so no step records a rounding. tf32 keeps f32 tensors and records
// the rounding on every Matmul (plan 1.7); so does tp-matmul-precision's
// bf16 (products rounded on f32 tensors).
// RUN: tpc-opt %s --tp-pipeline="train=false precision=bf16" -o %t.tpplan
// RUN: tp-run %t.tpplan --print-plan > %t.json
// RUN: %json %t.json version programs.0.tensors programs.0.steps | FileCheck %s
// RUN: tpc-opt %s --tp-pipeline="train=false precision=tf32" -o %t.tf32.tpplan
// RUN: tp-run %t.tf32.tpplan --print-plan > %t.tf32.json
// RUN: %json %t.tf32.json programs.0.steps.2 | FileCheck %s --check-prefix=TF32
// RUN: tpc-opt %s --tp-pipeline="train=false" -o %t.f32.tpplan
// RUN: tp-run %t.f32.tpplan --print-plan > %t.f32.json
// RUN: %json %t.f32.json programs.0.tensors programs.0.steps.2 | FileCheck %s --check-prefix=F32
// RUN: tpc-opt %s --tp-partition --tp-matmul-precision="precision=bf16" --tp-plan-memory -o %t.rounded.tpplan
// RUN: tp-run %t.rounded.tpplan --print-plan > %t.rounded.json
// RUN: %json %t.rounded.json programs.0.steps.2 | FileCheck %s --check-prefix=ROUNDED

// CHECK: version = "1.15"
// CHECK-NEXT: programs.0.tensors = [{"id": 0, "dtype": "F32", "shape": [8, 8], "storage": "Param", "index": 0}, {"id": 1, "dtype": "F32", "shape": [16, 8], "storage": "Param", "index": 1}, {"id": 2, "dtype": "I32", {{.*}}, {"id": 3, "dtype": "BF16", "shape": [2, 4, 8], "storage": "Arena", {{.*}}, {"id": 4, "dtype": "BF16", {{.*}}, {"id": 5, "dtype": "BF16", {{.*}}, {"id": 6, "dtype": "BF16", {{.*}}, {"id": 7, "dtype": "BF16", {{.*}}, {"id": 8, "dtype": "BF16", "shape": [8, 16], "storage": "Arena", {{.*}}}]
// CHECK-NEXT: programs.0.steps = [{"op": "Embedding", "operands": [1, 2], "results": [3], {{.*}}}, {"op": "Reshape", {{.*}}}, {"op": "Convert", "operands": [0], "results": [5], {{.*}}}, {"op": "Matmul", "operands": [4, 5], "results": [6], "location"{{.*}}}, {"op": "Convert", "operands": [1], "results": [7], {{.*}}}, {"op": "Matmul", "operands": [6, 7], "results": [8], "transpose_rhs": true, "location"{{.*}}}]
// TF32: programs.0.steps.2 = {"op": "Matmul", {{.*}}"precision": "TF32"{{.*}}}
// F32: programs.0.tensors = [{{.*}}]
// F32-NOT: BF16
// F32: programs.0.steps.2 = {"op": "Matmul"
// F32-NOT: "precision":
// ROUNDED: programs.0.steps.2 = {"op": "Matmul", "operands": [4, 0], {{.*}}"precision": "BF16"{{.*}}}

module attributes {tp.model_type = "test"} {
  func.func @forward(%w: tensor<8x8xf32> {tp.param = "w.weight", tp.init = "normal", tp.init_std = 0.02 : f64},
                     %emb: tensor<16x8xf32> {tp.param = "emb.weight", tp.init = "normal", tp.init_std = 0.02 : f64},
                     %tokens: tensor<2x4xi32> {tp.input = "tokens"}) -> (tensor<8x16xf32> {tp.output = "logits"}) {
    %0 = tp.embedding %emb, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %1 = tp.reshape %0 : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
    %2 = tp.matmul %1, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %3 = tp.matmul %2, %emb {transpose_rhs} : (tensor<8x8xf32>, tensor<16x8xf32>) -> tensor<8x16xf32>
    return %3 : tensor<8x16xf32>
  }
}
