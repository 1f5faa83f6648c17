pub async fn run(_g: &crate::cli::Global, _a: crate::cli::RunArgs) -> crate::exit::Outcome {
    todo!()
}
