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

/// Where a bench's workers run: threads of this process, or the ranks of
/// an MPI job (`mpirun -n N gradcomp bench ... --backend mpi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    InProcess,
    Mpi,
}

/// A column of a bench's table: its header, its width, and whether it is
/// left-aligned (names) or right-aligned (numbers).
pub(super) struct Column {
    pub header: &'static str,
    pub width: usize,
    pub left: bool,
}

impl Column {
    /// A left-aligned column (a name).
    pub const fn name(header: &'static str, width: usize) -> Self {
        Self { header, width, left: true }
    }

    /// A right-aligned column (a number).
    pub const fn number(header: &'static str, width: usize) -> Self {
        Self { header, width, left: false }
    }
}

/// Prints `rows` as JSON lines (`json`), or as a table of `columns`: a
/// header, then the lines `cells` gives for each row (one list of
/// formatted cells per line, in the columns' order).
pub(super) fn print_rows<R: serde::Serialize>(
    rows: &[R],
    json: bool,
    columns: &[Column],
    cells: impl Fn(&R) -> Vec<Vec<String>>,
) {
    if json {
        return print_json_lines(rows);
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = columns
            .iter()
            .zip(cells)
            .map(
                |(c, s)| {
                    if c.left {
                        format!("{s:<w$}", w = c.width)
                    } else {
                        format!("{s:>w$}", w = c.width)
                    }
                },
            )
            .collect();
        padded.join(" ").trim_end().to_string()
    };
    println!("{}", line(&columns.iter().map(|c| c.header.to_string()).collect::<Vec<_>>()));
    for r in rows {
        for cells in cells(r) {
            println!("{}", line(&cells));
        }
    }
}

/// Rank 0's rows of `measure` run on `backend`: on `workers` (default 4)
/// threads of this process, or on this MPI job's ranks (`None` on the
/// others). A binary built without MPI says how to rebuild.
pub(super) fn rows_on<R: Send>(
    backend: Backend,
    workers: Option<usize>,
    measure: impl Fn(&mut dyn gradcomp_comm::Collective) -> anyhow::Result<Vec<R>> + Sync,
) -> anyhow::Result<Option<Vec<R>>> {
    match backend {
        Backend::InProcess => {
            let n = workers.unwrap_or(4);
            if n == 0 {
                anyhow::bail!("--workers must be at least 1");
            }
            let results = gradcomp_comm::InProcessGroup::new(n).run(|mut c| measure(&mut c))?;
            let first =
                results.into_iter().next().expect("one worker").map_err(|p| anyhow::anyhow!("{p}"))?;
            first.map(Some)
        }
        Backend::Mpi => mpi_rows(workers, measure),
    }
}

#[cfg(feature = "mpi")]
fn mpi_rows<R>(
    workers: Option<usize>,
    measure: impl Fn(&mut dyn gradcomp_comm::Collective) -> anyhow::Result<Vec<R>>,
) -> anyhow::Result<Option<Vec<R>>> {
    use gradcomp_comm::Collective;
    let mut c = gradcomp_comm::mpi::MpiCollective::init(workers, std::time::Duration::from_secs(600))?;
    let rows = measure(&mut c)?;
    Ok((c.rank() == 0).then_some(rows))
}

#[cfg(not(feature = "mpi"))]
fn mpi_rows<R>(
    _: Option<usize>,
    _: impl Fn(&mut dyn gradcomp_comm::Collective) -> anyhow::Result<Vec<R>>,
) -> anyhow::Result<Option<Vec<R>>> {
    anyhow::bail!(
        "this gradcomp was built without MPI; rebuild with `cargo build --release -p gradcomp-cli --features mpi`"
    )
}
