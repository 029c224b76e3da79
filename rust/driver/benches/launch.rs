//! The launch floor: host cost of `cuLaunchKernel` from compiled code, per launch.
//!
//! Every fastlaunch figure is reported as a ratio to this floor measured in the same run
//! (`benchmarks/run.py` runs this binary first). Method, as in `BENCHMARKS.md`: batches of
//! 256 (`FASTLAUNCH_BENCH_BATCH`) back-to-back launches timed with `Instant`, the context synchronized between
//! batches (untimed), at least 50 batches; median, p10 and p90 of µs per launch.
//!
//! The kernels are empty PTX `.entry` functions generated here whose parameter lists are
//! numba's data model for each benchmark case (an N-d array is 5 + 2·N 8-byte values:
//! meminfo, parent, nitems, itemsize, data, shape, strides), loaded with the library API:
//!
//! | case | parameters |
//! |---|---|
//! | A | none |
//! | B | 1 × `float32[::1]` = 7 × `.u64` |
//! | C | 3 × 2-D `float32` C arrays (3 × 9 × `.u64`), `.u64`, `.f64`, `.u64`, `.f64` |
//! | D | 26 × `float32[::1]` = 26 × 7 × `.u64` |
//! | E16, E256 | 16 / 256 × `.f32` |
//!
//! Paths, each on `[1,1,1]x[1,1,1]` and on numba-cuda's own suite's `[128]x[128]`:
//!
//! - `floor`: parameters packed once, `CUfunction` (from `cuKernelGetFunction`), legacy
//!   default stream;
//! - `floor_kernel`: the same with the `CUkernel` handle passed as the function;
//! - `floor_stream`: the same as `floor` on a stream created here (non-blocking);
//! - `packer`: fastlaunch's `ParamBuffer` filled from a per-case plan before every launch.
//!
//! Output: one JSON object per line on stdout (`"kind":"meta"` first, then
//! `"kind":"result"` per case, path and launch shape); progress goes to stderr.
//!
//! Arguments: `--bench` measures (cargo bench passes it; without it the binary does a
//! 3-batch smoke run, as `cargo test --benches` expects), `--batches N`, `--cases A,B,..`,
//! `--criterion` to also run criterion groups (iter_custom, same batching) for case A and B.
//! Without a CUDA driver or GPU it prints "launch bench: no CUDA driver/GPU, skipped" and
//! exits 0.

use std::ffi::c_void;
use std::path::PathBuf;
use std::process::ExitCode;
use std::ptr;
use std::time::{Duration, Instant};

use criterion::Criterion;
use fastlaunch_driver::sys::CUfunction;
use fastlaunch_driver::{
    DeviceBuffer, Driver, Kernel, LaunchDims, Library, ParamBuffer, Result, Stream,
};

/// Launches per timed batch: under the stream's ~1000-entry queue.
const DEFAULT_BATCH: usize = 256;
/// Overrides the batch (the Python benchmarks read the same variable): smaller batches tell
/// whether a case is bound by the GPU draining its queue rather than by the host.
const BATCH_ENV: &str = "FASTLAUNCH_BENCH_BATCH";
const DEFAULT_BATCHES: usize = 200;
const SMOKE_BATCHES: usize = 3;
const MIN_BATCHES: usize = 50;
const WARMUP_BATCHES: usize = 4;
/// Elements of every array argument (float32), as in numba-cuda's own benchmarks.
const ARRAY_ELEMENTS: u64 = 128;
const ITEMSIZE: u64 = 4;

/// One flattened kernel parameter and its value.
#[derive(Clone, Copy, Debug)]
enum Param {
    U64(u64),
    F64(f64),
    F32(f32),
}

impl Param {
    fn ptx_type(self) -> &'static str {
        match self {
            Param::U64(_) => ".u64",
            Param::F64(_) => ".f64",
            Param::F32(_) => ".f32",
        }
    }

    /// The value as it sits in an 8-byte slot (little-endian, at the start).
    fn slot(self) -> u64 {
        match self {
            Param::U64(v) => v,
            Param::F64(v) => v.to_bits(),
            Param::F32(v) => u64::from(v.to_bits()),
        }
    }

    #[inline(always)]
    fn push(self, buffer: &mut ParamBuffer) {
        match self {
            Param::U64(v) => buffer.push_u64(v),
            Param::F64(v) => buffer.push_f64(v),
            Param::F32(v) => buffer.push_f32(v),
        }
    }
}

/// Appends a C-contiguous float32 array in numba's data model.
fn push_array(params: &mut Vec<Param>, data: u64, shape: &[u64]) {
    let nitems: u64 = shape.iter().product();
    params.extend([
        Param::U64(0), // meminfo
        Param::U64(0), // parent
        Param::U64(nitems),
        Param::U64(ITEMSIZE),
        Param::U64(data),
    ]);
    params.extend(shape.iter().map(|&n| Param::U64(n)));
    let mut strides = vec![0u64; shape.len()];
    let mut stride = ITEMSIZE;
    for (i, &n) in shape.iter().enumerate().rev() {
        strides[i] = stride;
        stride *= n;
    }
    params.extend(strides.into_iter().map(Param::U64));
}

struct Case {
    id: &'static str,
    params: Vec<Param>,
}

/// The benchmark cases; `data` holds one device pointer per array argument.
fn cases(data: &[u64]) -> Vec<Case> {
    let one_d = [ARRAY_ELEMENTS];
    let two_d = [16, ARRAY_ELEMENTS / 16];

    let mut b = Vec::new();
    push_array(&mut b, data[0], &one_d);

    let mut c = Vec::new();
    for &ptr in &data[..3] {
        push_array(&mut c, ptr, &two_d);
    }
    c.extend([
        Param::U64(3),
        Param::F64(2.5),
        Param::U64(7),
        Param::F64(0.5),
    ]);

    let mut d = Vec::new();
    for &ptr in &data[..26] {
        push_array(&mut d, ptr, &one_d);
    }

    let scalars = |n: usize| (0..n).map(|i| Param::F32(i as f32 + 0.5)).collect();
    vec![
        Case {
            id: "A",
            params: Vec::new(),
        },
        Case { id: "B", params: b },
        Case { id: "C", params: c },
        Case { id: "D", params: d },
        Case {
            id: "E16",
            params: scalars(16),
        },
        Case {
            id: "E256",
            params: scalars(256),
        },
    ]
}

/// NUL-terminated PTX text of an empty kernel `entry` with `params`.
fn empty_kernel_ptx(entry: &str, params: &[Param], target: &str) -> Vec<u8> {
    let list = params
        .iter()
        .enumerate()
        .map(|(i, p)| format!("\t.param {} {entry}_param_{i}", p.ptx_type()))
        .collect::<Vec<_>>()
        .join(",\n");
    let list = if list.is_empty() {
        String::new()
    } else {
        format!("\n{list}\n")
    };
    let text = format!(
        ".version 8.0\n.target {target}\n.address_size 64\n\n\
         .visible .entry {entry}({list})\n{{\n\tret;\n}}\n\0"
    );
    text.into_bytes()
}

/// The PTX target: the device's own architecture, capped at sm_90 (PTX ISA 8.0's newest);
/// the driver JIT-compiles it forward to newer GPUs.
fn ptx_target(driver: &Driver) -> Result<String> {
    let (major, minor) = driver.compute_capability(0)?;
    let cc = (major * 10 + minor).min(90);
    Ok(format!("sm_{cc}"))
}

#[derive(Debug)]
struct Stats {
    median: f64,
    p10: f64,
    p90: f64,
    min: f64,
    mean: f64,
}

/// Linear-interpolated percentile of sorted values (numpy's default method).
/// Launches per timed batch: [`DEFAULT_BATCH`], or [`BATCH_ENV`] when set to a positive count.
fn batch() -> usize {
    std::env::var(BATCH_ENV)
        .ok()
        .and_then(|value| value.parse::<usize>().ok())
        .filter(|&count| count > 0)
        .unwrap_or(DEFAULT_BATCH)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let position = q / 100.0 * (sorted.len() - 1) as f64;
    let low = position.floor() as usize;
    let high = position.ceil() as usize;
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

fn stats(mut per_launch_us: Vec<f64>) -> Stats {
    per_launch_us.sort_by(f64::total_cmp);
    Stats {
        median: percentile(&per_launch_us, 50.0),
        p10: percentile(&per_launch_us, 10.0),
        p90: percentile(&per_launch_us, 90.0),
        min: per_launch_us[0],
        mean: per_launch_us.iter().sum::<f64>() / per_launch_us.len() as f64,
    }
}

/// Times `batches` batches of [`batch()`] calls of `launch`, synchronizing (untimed) before
/// each; returns µs per launch of each batch.
fn time_batches(
    driver: &Driver,
    batches: usize,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let batch = batch();
    let mut per_launch_us = Vec::with_capacity(batches);
    for _ in 0..WARMUP_BATCHES {
        driver.synchronize()?;
        for _ in 0..batch {
            launch()?;
        }
    }
    for _ in 0..batches {
        driver.synchronize()?;
        let start = Instant::now();
        for _ in 0..batch {
            launch()?;
        }
        let elapsed = start.elapsed();
        per_launch_us.push(elapsed.as_secs_f64() * 1e6 / batch as f64);
    }
    driver.synchronize()?;
    Ok(per_launch_us)
}

/// Parameters packed once: 8-byte slots and the `void*` array pointing at them.
struct Prepacked {
    slots: Vec<u64>,
    pointers: Vec<*mut c_void>,
}

impl Prepacked {
    fn new(params: &[Param]) -> Prepacked {
        let mut slots: Vec<u64> = params.iter().map(|p| p.slot()).collect();
        let base = slots.as_mut_ptr();
        let pointers = (0..slots.len())
            .map(|i| base.wrapping_add(i).cast::<c_void>())
            .collect();
        Prepacked { slots, pointers }
    }

    /// The `void**` for the driver (null for a kernel without parameters).
    fn as_params(&mut self) -> *mut *mut c_void {
        debug_assert_eq!(self.slots.len(), self.pointers.len());
        if self.pointers.is_empty() {
            ptr::null_mut()
        } else {
            self.pointers.as_mut_ptr()
        }
    }
}

/// A loaded case: its library (kept alive), kernel and function handles.
struct Loaded<'a> {
    case: &'a Case,
    _library: Library,
    kernel: Kernel,
    function: CUfunction,
}

fn load<'a>(driver: &'static Driver, case: &'a Case, target: &str) -> Result<Loaded<'a>> {
    let entry = format!("empty_{}", case.id.to_ascii_lowercase());
    let library = Library::load(driver, &empty_kernel_ptx(&entry, &case.params, target))?;
    let kernel = library.kernel(&entry)?;
    let function = kernel.function_in_current_context(driver)?;
    Ok(Loaded {
        case,
        _library: library,
        kernel,
        function,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Floor,
    FloorKernel,
    FloorStream,
    Packer,
}

impl Path {
    const ALL: [Path; 4] = [
        Path::Floor,
        Path::FloorKernel,
        Path::FloorStream,
        Path::Packer,
    ];

    fn name(self) -> &'static str {
        match self {
            Path::Floor => "floor",
            Path::FloorKernel => "floor_kernel",
            Path::FloorStream => "floor_stream",
            Path::Packer => "packer",
        }
    }
}

/// Measures one case on one path and launch shape; per-launch µs of each batch.
fn measure(
    driver: &'static Driver,
    loaded: &Loaded<'_>,
    path: Path,
    dims: LaunchDims,
    stream: &Stream,
    batches: usize,
) -> Result<Vec<f64>> {
    match path {
        Path::Floor | Path::FloorKernel | Path::FloorStream => {
            let function = if path == Path::FloorKernel {
                loaded.kernel.as_function()
            } else {
                loaded.function
            };
            let dims = if path == Path::FloorStream {
                LaunchDims {
                    stream: stream.handle(),
                    ..dims
                }
            } else {
                dims
            };
            let mut packed = Prepacked::new(&loaded.case.params);
            let params = packed.as_params();
            // SAFETY: `params` points to one pointer per kernel parameter, each to an 8-byte
            // slot holding a value of that parameter's type; the kernel is empty, so the
            // device pointers in them are never dereferenced (they are live allocations).
            time_batches(driver, batches, || unsafe {
                driver.launch(function, &dims, params)
            })
        }
        Path::Packer => {
            let plan = loaded.case.params.as_slice();
            let function = loaded.function;
            let mut buffer = ParamBuffer::with_capacity(plan.len());
            time_batches(driver, batches, || {
                buffer.clear();
                for &param in plan {
                    param.push(&mut buffer);
                }
                let params = buffer.as_params();
                // SAFETY: as above; the buffer holds one slot per parameter and is not
                // changed until the launch returns.
                unsafe { driver.launch(function, &dims, params) }
            })
        }
    }
}

fn dims(threads: u32) -> LaunchDims {
    LaunchDims {
        grid: [threads, 1, 1],
        block: [threads, 1, 1],
        shared_mem_bytes: 0,
        stream: 0,
    }
}

fn json_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
            c => vec![c],
        })
        .collect()
}

struct Options {
    bench: bool,
    batches: usize,
    cases: Option<Vec<String>>,
    criterion: bool,
    /// Print this case's PTX (fake data pointers, sm_90) and exit: needs no GPU.
    print_ptx: Option<String>,
    /// Also measure aggregate launches per second from 1, 2, 4 and 8 threads.
    threads: bool,
}

const USAGE: &str = "usage: launch-bench [--bench] [--batches N] [--cases A,B,C,D,E16,E256] \
                     [--criterion] [--threads] [--print-ptx CASE]";

fn parse_args() -> std::result::Result<Options, String> {
    let mut options = Options {
        bench: false,
        batches: DEFAULT_BATCHES,
        cases: None,
        criterion: false,
        print_ptx: None,
        threads: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => options.bench = true,
            "--criterion" => options.criterion = true,
            "--threads" => options.threads = true,
            "--print-ptx" => {
                options.print_ptx = Some(args.next().ok_or("--print-ptx needs a case")?);
            }
            "--batches" => {
                let value = args.next().ok_or("--batches needs a number")?;
                let batches: usize = value
                    .parse()
                    .map_err(|_| format!("--batches: {value:?} is not a number"))?;
                options.batches = batches.max(MIN_BATCHES);
            }
            "--cases" => {
                let value = args.next().ok_or("--cases needs a list such as A,B")?;
                options.cases = Some(value.split(',').map(|s| s.trim().to_owned()).collect());
            }
            "-h" | "--help" => {
                return Err(
                    "usage: launch-bench [--bench] [--batches N] [--cases A,B,C,D,E16,E256] \
                     [--criterion]"
                        .to_owned(),
                )
            }
            other => eprintln!("launch bench: ignoring argument {other:?}"),
        }
    }
    if !options.bench {
        options.batches = SMOKE_BATCHES;
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            let help = message == USAGE;
            return if help {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    if let Some(id) = &options.print_ptx {
        let data: Vec<u64> = (1..=26).map(|i| i << 20).collect();
        return match cases(&data).iter().find(|c| c.id.eq_ignore_ascii_case(id)) {
            Some(case) => {
                let entry = format!("empty_{}", case.id.to_ascii_lowercase());
                let ptx = empty_kernel_ptx(&entry, &case.params, "sm_90");
                print!("{}", String::from_utf8_lossy(&ptx[..ptx.len() - 1]));
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("unknown case {id:?}");
                ExitCode::from(2)
            }
        };
    }
    let driver = match Driver::get() {
        Ok(driver) => driver,
        Err(why) => {
            println!("launch bench: no CUDA driver/GPU, skipped");
            eprintln!("({why})");
            return ExitCode::SUCCESS;
        }
    };
    match run(driver, &options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("launch bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(driver: &'static Driver, options: &Options) -> Result<()> {
    let batch = batch();
    driver.select_device(0)?;
    let target = ptx_target(driver)?;
    let (major, minor) = driver.compute_capability(0)?;
    println!(
        "{{\"kind\":\"meta\",\"device\":\"{}\",\"compute_capability\":\"{major}.{minor}\",\
         \"driver_version\":{},\"ptx_target\":\"{target}\",\"batch\":{batch},\
         \"batches\":{},\"mode\":\"{}\"}}",
        json_escape(&driver.device_name(0)?),
        driver.version(),
        options.batches,
        if options.bench { "bench" } else { "smoke" },
    );

    let buffers = (0..26)
        .map(|_| DeviceBuffer::alloc(driver, (ARRAY_ELEMENTS * ITEMSIZE) as usize))
        .collect::<Result<Vec<_>>>()?;
    for buffer in &buffers {
        buffer.fill(0)?;
    }
    let data: Vec<u64> = buffers.iter().map(DeviceBuffer::ptr).collect();
    let all_cases = cases(&data);
    let selected: Vec<&Case> = all_cases
        .iter()
        .filter(|case| {
            options
                .cases
                .as_ref()
                .is_none_or(|wanted| wanted.iter().any(|w| w.eq_ignore_ascii_case(case.id)))
        })
        .collect();
    let stream = Stream::create(driver, true)?;

    for case in &selected {
        let loaded = load(driver, case, &target)?;
        for threads in [1u32, 128] {
            for path in Path::ALL {
                let per_launch = measure(
                    driver,
                    &loaded,
                    path,
                    dims(threads),
                    &stream,
                    options.batches,
                )?;
                let s = stats(per_launch);
                println!(
                    "{{\"kind\":\"result\",\"case\":\"{}\",\"path\":\"{}\",\"grid\":{threads},\
                     \"block\":{threads},\"params\":{},\"median_us\":{:.4},\"p10_us\":{:.4},\
                     \"p90_us\":{:.4},\"min_us\":{:.4},\"mean_us\":{:.4},\"batches\":{},\
                     \"batch\":{batch}}}",
                    case.id,
                    path.name(),
                    case.params.len(),
                    s.median,
                    s.p10,
                    s.p90,
                    s.min,
                    s.mean,
                    options.batches,
                );
                eprintln!(
                    "launch bench: {:>4} {:<12} [{threads}]x[{threads}] median {:.3} us \
                     (p10 {:.3}, p90 {:.3})",
                    case.id,
                    path.name(),
                    s.median,
                    s.p10,
                    s.p90
                );
            }
        }
    }

    if options.criterion {
        run_criterion(driver, &selected, &target)?;
    }
    if options.threads {
        if let Some(case) = all_cases.iter().find(|case| case.id == "B") {
            run_threads(driver, case, &target)?;
        }
    }
    Ok(())
}

/// Aggregate `cuLaunchKernel` rate from 1, 2, 4 and 8 threads, each on its own non-blocking
/// stream in the primary context, launching for one second: what the driver itself allows
/// when no interpreter lock is involved (compare `benchmarks/threads.py`).
fn run_threads(driver: &'static Driver, case: &Case, target: &str) -> Result<()> {
    let loaded = load(driver, case, target)?;
    let function = FunctionHandle(loaded.function);
    let plan = case.params.as_slice();
    let mut rates = Vec::new();
    for threads in [1usize, 2, 4, 8] {
        let start_line = std::sync::Barrier::new(threads + 1);
        let counts = std::thread::scope(|scope| -> Result<Vec<u64>> {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let start_line = &start_line;
                    scope.spawn(move || -> Result<u64> {
                        let function = function;
                        driver.select_device(0)?;
                        let stream = Stream::create(driver, true)?;
                        let mut packed = Prepacked::new(plan);
                        let params = packed.as_params();
                        let dims = LaunchDims {
                            stream: stream.handle(),
                            ..dims(1)
                        };
                        start_line.wait();
                        let deadline = Instant::now() + Duration::from_secs(1);
                        let mut done = 0u64;
                        while Instant::now() < deadline {
                            for _ in 0..64 {
                                // SAFETY: as in `measure`: one packed slot per parameter.
                                unsafe { driver.launch(function.0, &dims, params) }?;
                            }
                            done += 64;
                        }
                        stream.synchronize()?;
                        Ok(done)
                    })
                })
                .collect();
            start_line.wait();
            workers
                .into_iter()
                .map(|w| w.join().expect("a launch thread panicked"))
                .collect()
        })?;
        let rate = counts.iter().sum::<u64>() as f64 / 1e3; // launches per ms = k/s
        rates.push(rate);
        println!(
            "{{\"kind\":\"threads\",\"case\":\"{}\",\"threads\":{threads},\"k_launches_per_s\":{rate:.1}}}",
            case.id
        );
        eprintln!(
            "launch bench: {threads} threads on their own streams: {rate:.1} k launches/s \
             ({:.2}x one thread)",
            rate / rates[0]
        );
    }
    Ok(())
}

/// A function handle sent to the launch threads.
#[derive(Clone, Copy)]
struct FunctionHandle(CUfunction);

// SAFETY: a CUfunction of a module in the primary context may be launched from any thread
// that has that context current.
unsafe impl Send for FunctionHandle {}

/// Criterion groups for the floor and the packer on `[1]x[1]`, timed with the same batching
/// (`iter_custom`: launches in batches of at most [`batch()`], synchronized untimed between).
fn run_criterion(driver: &'static Driver, cases: &[&Case], target: &str) -> Result<()> {
    let output = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("fastlaunch-criterion"));
    let mut criterion = Criterion::default()
        .output_directory(&output)
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut group = criterion.benchmark_group("launch");
    for case in cases.iter().filter(|case| matches!(case.id, "A" | "B")) {
        let loaded = load(driver, case, target)?;
        for path in [Path::Floor, Path::Packer] {
            let dims = dims(1);
            let function = loaded.function;
            let plan = loaded.case.params.as_slice();
            let mut packed = Prepacked::new(plan);
            let prepacked = packed.as_params();
            let mut buffer = ParamBuffer::with_capacity(plan.len());
            group.bench_function(format!("{}/{}", case.id, path.name()), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let n = left.min(batch() as u64);
                        driver.synchronize().expect("synchronizing");
                        let start = Instant::now();
                        for _ in 0..n {
                            let params = if path == Path::Packer {
                                buffer.clear();
                                for &param in plan {
                                    param.push(&mut buffer);
                                }
                                buffer.as_params()
                            } else {
                                prepacked
                            };
                            // SAFETY: as in `measure`.
                            unsafe { driver.launch(function, &dims, params) }.expect("launching");
                        }
                        total += start.elapsed();
                        left -= n;
                    }
                    total
                })
            });
        }
    }
    group.finish();
    criterion.final_summary();
    Ok(())
}
