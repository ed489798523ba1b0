//! What several benches share: the synthetic task their `--model` names,
//! and printing rows as JSON lines.

/// The synthetic image task a bench's `--model` trains on: ResNet-18 in
/// its CIFAR form (3×32×32), the MNIST-sized models (1×28×28); 10 classes.
pub(super) fn image_task(model: &str) -> gradcomp_train::models::ImageTask {
    let shape = if model == "resnet18" { [3, 32, 32] } else { [1, 28, 28] };
    gradcomp_train::models::ImageTask { shape, classes: 10 }
}

/// Prints `rows` as JSON, one object per line (`--json`).
pub(super) fn print_json_lines<T: serde::Serialize>(rows: &[T]) {
    for r in rows {
        println!("{}", serde_json::to_string(r).expect("rows serialize"));
    }
}
