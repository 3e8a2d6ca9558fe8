// tp-pipeline's precision reaches the plan: every Matmul step records the
// type its operands are rounded to (plan 1.7); other steps have none.
// RUN: tpc-opt %s --tp-pipeline="train=false precision=bf16" -o %t.tpplan
// RUN: tp-run %t.tpplan --print-plan > %t.json
// RUN: %json %t.json version programs.0.steps.0 programs.0.steps.2 programs.0.steps.3 | FileCheck %s
// RUN: tpc-opt %s --tp-pipeline="train=false precision=tf32" -o %t.tf32.tpplan
// RUN: tp-run %t.tf32.tpplan --print-plan > %t.tf32.json
// RUN: %json %t.tf32.json programs.0.steps.2 | FileCheck %s --check-prefix=TF32
// RUN: tpc-opt %s --tp-pipeline="train=false" -o %t.f32.tpplan
// RUN: tp-run %t.f32.tpplan --print-plan > %t.f32.json
// RUN: %json %t.f32.json programs.0.steps.2 | FileCheck %s --check-prefix=F32

// CHECK: version = "1.9"
// CHECK-NEXT: programs.0.steps.0 = {"op": "Embedding"
// CHECK-NOT: "precision":
// CHECK-SAME: }
// CHECK-NEXT: programs.0.steps.2 = {"op": "Matmul", {{.*}}"precision": "BF16"{{.*}}}
// CHECK-NEXT: programs.0.steps.3 = {"op": "Matmul", {{.*}}"transpose_rhs": true, "precision": "BF16"{{.*}}}
// TF32: programs.0.steps.2 = {"op": "Matmul", {{.*}}"precision": "TF32"{{.*}}}
// F32: programs.0.steps.2 = {"op": "Matmul"
// F32-NOT: "precision":

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
