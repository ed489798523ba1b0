fn main() {
    let cfg = gradcomp_train::config::TrainConfig::load(
        std::path::Path::new(&std::env::args().nth(1).unwrap()),
        &[],
    )
    .unwrap();
    let s =
        gradcomp_train::trainer::train(&cfg, Default::default(), Box::new(gradcomp_train::trainer::Silent))
            .unwrap();
    println!("{}", serde_json::to_string_pretty(&s.epochs).unwrap());
}
