//! The driver layer against a real CUDA driver and GPU: devices, primary contexts and the
//! per-thread context stack, device memory, libraries, launches, streams and events.
//!
//! Every test that needs a GPU is `#[ignore]`d, so `cargo test` passes on machines without
//! one; the GPU machine runs this binary (`.gpu/bin/driver-gpu-tests`) with `--ignored`.
//! The kernels are hand-written PTX (no nvcc is needed to build this), loaded with the
//! library API, which JIT-compiles them for the device.
//!
//! The tests run on parallel threads that share device 0's primary context. A test that
//! needs a context makes it current with `select_device(0)`, which replaces the top of the
//! thread's context stack instead of growing it; the tests of the stack itself run on a
//! thread of their own, whose stack starts empty. Both hold under `--test-threads=1` too,
//! where libtest runs every test on the main thread. Nothing here provokes a sticky error
//! (an illegal address, a trap), which would break every other test in the process.

use std::ptr;

use fastlaunch_driver::context::attribute;
use fastlaunch_driver::{
    DeviceBuffer, Driver, Error, Event, Kernel, KernelAttribute, LaunchDims, Library, ParamBuffer,
    Result, Stream,
};

/// Two kernels in PTX ISA 8.0 for sm_90 (Hopper; the GPU machine has an H200).
///
/// `fill(float *out, unsigned n, float value)` writes `value` to `out[i]` for every global
/// thread index `i < n`.
///
/// `numba_array` takes one `float32[::1]` argument in numba's data model, seven `.u64`
/// values (meminfo, parent, nitems, itemsize, data, shape0, stride0), and writes the six
/// that are not `data`, converted to float, to `data[0..6]`: nitems, itemsize, shape0,
/// stride0, meminfo, parent. It is launched with one thread.
///
/// `spin_copy(unsigned *dst, const unsigned *src, unsigned n, u64 iterations)` has every
/// thread run a chain of `iterations` dependent multiply-adds (a few ns each), then copy
/// `src[i]` to `dst[i]` for `i < n`: work that reads memory long after it was enqueued, to
/// show a free waiting for it.
const KERNELS_PTX: &str = concat!(
    r#".version 8.0
.target sm_90
.address_size 64

.visible .entry fill(
	.param .u64 fill_param_0,
	.param .u32 fill_param_1,
	.param .f32 fill_param_2
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<2>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [fill_param_0];
	ld.param.u32 %r1, [fill_param_1];
	ld.param.f32 %f1, [fill_param_2];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	cvt.u64.u32 %rd3, %r5;
	shl.b64 %rd3, %rd3, 2;
	add.s64 %rd4, %rd2, %rd3;
	st.global.f32 [%rd4], %f1;
DONE:
	ret;
}

.visible .entry numba_array(
	.param .u64 numba_array_param_0,
	.param .u64 numba_array_param_1,
	.param .u64 numba_array_param_2,
	.param .u64 numba_array_param_3,
	.param .u64 numba_array_param_4,
	.param .u64 numba_array_param_5,
	.param .u64 numba_array_param_6
)
{
	.reg .f32 %f<7>;
	.reg .b64 %rd<9>;

	ld.param.u64 %rd1, [numba_array_param_0];
	ld.param.u64 %rd2, [numba_array_param_1];
	ld.param.u64 %rd3, [numba_array_param_2];
	ld.param.u64 %rd4, [numba_array_param_3];
	ld.param.u64 %rd5, [numba_array_param_4];
	ld.param.u64 %rd6, [numba_array_param_5];
	ld.param.u64 %rd7, [numba_array_param_6];
	cvta.to.global.u64 %rd8, %rd5;
	cvt.rn.f32.u64 %f1, %rd3;
	st.global.f32 [%rd8], %f1;
	cvt.rn.f32.u64 %f2, %rd4;
	st.global.f32 [%rd8+4], %f2;
	cvt.rn.f32.u64 %f3, %rd6;
	st.global.f32 [%rd8+8], %f3;
	cvt.rn.f32.u64 %f4, %rd7;
	st.global.f32 [%rd8+12], %f4;
	cvt.rn.f32.u64 %f5, %rd1;
	st.global.f32 [%rd8+16], %f5;
	cvt.rn.f32.u64 %f6, %rd2;
	st.global.f32 [%rd8+20], %f6;
	ret;
}

.visible .entry spin_copy(
	.param .u64 spin_copy_param_0,
	.param .u64 spin_copy_param_1,
	.param .u32 spin_copy_param_2,
	.param .u64 spin_copy_param_3
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<7>;
	.reg .f32 %f<2>;
	.reg .b64 %rd<12>;

	ld.param.u64 %rd1, [spin_copy_param_0];
	ld.param.u64 %rd2, [spin_copy_param_1];
	ld.param.u32 %r1, [spin_copy_param_2];
	ld.param.u64 %rd3, [spin_copy_param_3];
	cvta.to.global.u64 %rd7, %rd1;
	cvta.to.global.u64 %rd8, %rd2;
	mov.f32 %f1, 0f00000000;
	mov.u64 %rd4, 0;
SPIN:
	setp.ge.u64 %p1, %rd4, %rd3;
	@%p1 bra SPUN;
	fma.rn.f32 %f1, %f1, 0f3F7FFFFF, 0f3F800000;
	add.u64 %rd4, %rd4, 1;
	bra.uni SPIN;
SPUN:
	// never true (the sum stays positive), but the compiler cannot drop the loop above
	setp.eq.f32 %p3, %f1, 0fBF800000;
	@%p3 st.global.f32 [%rd7], %f1;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p2, %r5, %r1;
	@%p2 bra COPIED;
	mul.wide.u32 %rd9, %r5, 4;
	add.s64 %rd10, %rd8, %rd9;
	ld.global.u32 %r6, [%rd10];
	add.s64 %rd11, %rd7, %rd9;
	st.global.u32 [%rd11], %r6;
COPIED:
	ret;
}
"#,
    "\0"
);

/// What `DeviceBuffer::fill(0xFF)` leaves in each f32: a NaN no kernel here writes.
const UNTOUCHED: u32 = 0xFFFF_FFFF;

fn driver() -> &'static Driver {
    match Driver::get() {
        Ok(driver) => driver,
        Err(e) => panic!("this test needs a CUDA driver and GPU: {e}"),
    }
}

/// The driver, with device 0's primary context current on this thread.
fn on_device_0() -> &'static Driver {
    let driver = driver();
    driver
        .select_device(0)
        .expect("making device 0's primary context current");
    driver
}

/// Runs `body` on a new thread (whose CUDA context stack is empty), re-raising its panic.
fn on_fresh_thread<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(body)
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn dims(grid: u32, block: u32, stream: usize) -> LaunchDims {
    LaunchDims {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
        stream,
    }
}

/// A device buffer of `len` f32s, every byte 0xFF.
fn sentinel_buffer(driver: &'static Driver, len: usize) -> DeviceBuffer {
    let buffer = DeviceBuffer::alloc(driver, len * 4).expect("allocating device memory");
    buffer.fill(0xFF).expect("filling device memory");
    buffer
}

/// The buffer's contents as f32s (call after the work writing it has finished).
fn read_f32s(buffer: &DeviceBuffer) -> Vec<f32> {
    let mut bytes = vec![0u8; buffer.len()];
    buffer
        .copy_to_host(&mut bytes)
        .expect("copying device to host");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Asserts `values[..n] == value` and that the rest was not written.
fn assert_filled(values: &[f32], n: usize, value: f32) {
    for (i, v) in values.iter().enumerate() {
        if i < n {
            assert_eq!(*v, value, "element {i} of {}", values.len());
        } else {
            assert_eq!(
                v.to_bits(),
                UNTOUCHED,
                "element {i} (>= n = {n}) was written"
            );
        }
    }
}

/// The test PTX, loaded, and its two kernels.
struct TestKernels {
    /// Keeps the kernels loaded.
    _library: Library,
    fill: Kernel,
    numba_array: Kernel,
    spin_copy: Kernel,
}

impl TestKernels {
    fn load(driver: &'static Driver) -> TestKernels {
        let library = Library::load(driver, KERNELS_PTX.as_bytes()).expect("loading the PTX");
        TestKernels {
            fill: library.kernel("fill").expect("kernel fill"),
            numba_array: library.kernel("numba_array").expect("kernel numba_array"),
            spin_copy: library.kernel("spin_copy").expect("kernel spin_copy"),
            _library: library,
        }
    }

    /// The parameters of `fill(buffer, n, value)`, checking that `n` f32s fit `buffer`.
    fn fill_params(buffer: &DeviceBuffer, n: u32, value: f32) -> ParamBuffer {
        assert!(n as usize * 4 <= buffer.len(), "fill of {n} f32s overruns");
        let mut params = ParamBuffer::with_capacity(3);
        params.push_u64(buffer.ptr());
        params.push_bytes(n.to_le_bytes());
        params.push_f32(value);
        params
    }

    /// Launches `fill(buffer, n, value)` with `cuLaunchKernel`.
    fn fill(
        &self,
        driver: &Driver,
        buffer: &DeviceBuffer,
        n: u32,
        value: f32,
        dims: &LaunchDims,
    ) -> Result<()> {
        let mut params = Self::fill_params(buffer, n, value);
        // SAFETY: `fill` takes (.u64, .u32, .f32) and `params` holds three pointers, each
        // to an 8-byte slot with that value at its start; the kernel writes only out[i] for
        // i < n, inside `buffer` (checked by `fill_params`), which outlives the launch
        // because every caller synchronizes before dropping it.
        unsafe { driver.launch(self.fill.as_function(), dims, params.as_params()) }
    }

    /// Launches `fill(buffer, n, value)` with `cuLaunchKernelEx`.
    #[allow(clippy::too_many_arguments)]
    fn fill_ex(
        &self,
        driver: &Driver,
        buffer: &DeviceBuffer,
        n: u32,
        value: f32,
        dims: &LaunchDims,
        cooperative: bool,
        cluster: Option<[u32; 3]>,
    ) -> Result<()> {
        let mut params = Self::fill_params(buffer, n, value);
        // SAFETY: as in `fill`.
        unsafe {
            driver.launch_ex(
                self.fill.as_function(),
                dims,
                params.as_params(),
                cooperative,
                cluster,
            )
        }
    }

    /// Launches `spin_copy(dst, src, n, iterations)` over `n` threads on `stream`.
    ///
    /// # Safety
    /// `dst` and `src` hold `n` u32s each until the kernel has run.
    unsafe fn spin_copy(
        &self,
        driver: &Driver,
        dst: u64,
        src: u64,
        n: u32,
        iterations: u64,
        stream: usize,
    ) -> Result<()> {
        let mut params = ParamBuffer::with_capacity(4);
        params.push_u64(dst);
        params.push_u64(src);
        params.push_bytes(n.to_le_bytes());
        params.push_u64(iterations);
        // SAFETY: `spin_copy` takes (.u64, .u64, .u32, .u64), one 8-byte slot each with the
        // value at its start; it touches only the first `n` u32s of `dst` and `src`, valid
        // until it has run per the caller.
        unsafe {
            driver.launch(
                self.spin_copy.as_function(),
                &dims(n.div_ceil(256), 256, stream),
                params.as_params(),
            )
        }
    }
}

/// Whether `id` looks like `cuDeviceGetPCIBusId`'s `domain:bus:device.function` (hex; the
/// domain has 4 digits, or 8 as nvidia-smi prints it).
fn is_pci_bus_id(id: &str) -> bool {
    let hex = |s: &str, lens: &[usize]| {
        lens.contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit())
    };
    let parts: Vec<&str> = id.split(':').collect();
    let [domain, bus, rest] = parts[..] else {
        return false;
    };
    let Some((device, function)) = rest.split_once('.') else {
        return false;
    };
    hex(domain, &[4, 8]) && hex(bus, &[2]) && hex(device, &[2]) && hex(function, &[1])
}

// ---- without a GPU ----

#[test]
fn get_returns_one_result_without_panicking() {
    // Without a driver or GPU this is an error; with one it is the driver. Either way it
    // is initialised once: a second call gives the same driver or the same error.
    match (Driver::get(), Driver::get()) {
        (Ok(a), Ok(b)) => assert!(ptr::eq(a, b)),
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            assert!(!a.to_string().is_empty());
        }
        _ => panic!("Driver::get changed its answer"),
    }
}

#[test]
fn the_ptx_is_nul_terminated_once() {
    let bytes = KERNELS_PTX.as_bytes();
    assert_eq!(bytes.last(), Some(&0));
    assert_eq!(bytes.iter().filter(|&&b| b == 0).count(), 1);
    assert!(KERNELS_PTX.starts_with(".version 8.0\n.target sm_90\n.address_size 64\n"));
}

#[test]
fn pci_bus_id_check() {
    assert!(is_pci_bus_id("0000:1B:00.0"));
    assert!(is_pci_bus_id("00000000:c1:00.0"));
    assert!(!is_pci_bus_id("1B:00.0"));
    assert!(!is_pci_bus_id("0000:1B:00"));
    assert!(!is_pci_bus_id("0000:1G:00.0"));
    assert!(!is_pci_bus_id(""));
}

// ---- devices and contexts ----

#[test]
#[ignore = "needs a CUDA GPU"]
fn devices_are_listed_and_described() {
    let driver = driver();
    assert!(
        driver.version() >= 12000,
        "driver version {}",
        driver.version()
    );
    let count = driver.device_count();
    assert!(count >= 1);
    for ordinal in 0..count {
        assert_eq!(driver.device(ordinal).expect("device").ordinal, ordinal);
        let name = driver.device_name(ordinal).expect("device name");
        assert!(!name.trim().is_empty(), "device {ordinal} has no name");
        let cc = driver
            .compute_capability(ordinal)
            .expect("compute capability");
        assert!(
            cc >= (7, 0),
            "device {ordinal} ({name}): compute capability {cc:?}"
        );
        let uuid = driver.device_uuid(ordinal).expect("uuid");
        assert_ne!(uuid, [0u8; 16], "device {ordinal} has a zero UUID");
        let bus_id = driver.device_pci_bus_id(ordinal).expect("pci bus id");
        assert!(
            is_pci_bus_id(&bus_id),
            "device {ordinal}: PCI bus id {bus_id:?}"
        );
        let sms = driver
            .device_attribute(ordinal, attribute::MULTIPROCESSOR_COUNT)
            .expect("multiprocessor count");
        assert!(sms > 0, "device {ordinal}: {sms} multiprocessors");
        let warp = attribute::by_name("CU_DEVICE_ATTRIBUTE_WARP_SIZE").expect("a known name");
        assert_eq!(
            driver.device_attribute(ordinal, warp).expect("warp size"),
            32
        );
        assert!(driver.device_total_memory(ordinal).expect("total memory") > 0);
    }
    assert!(matches!(
        driver.device(count),
        Err(Error::NoSuchDevice { .. })
    ));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_primary_context_is_retained_once() {
    let driver = driver();
    let first = driver.primary_context(0).expect("primary context");
    let second = driver.primary_context(0).expect("primary context again");
    assert_eq!(first, second);
    assert_ne!(first.address(), 0);
    let elsewhere = on_fresh_thread(move || driver.primary_context(0).expect("from a thread"));
    assert_eq!(elsewhere, first);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn push_and_pop_on_a_fresh_thread() {
    let driver = driver();
    on_fresh_thread(move || {
        assert_eq!(driver.current_context().expect("current"), None);
        assert_eq!(driver.current_device().expect("current device"), None);
        let primary = driver.primary_context(0).expect("primary context");
        driver.push_context(primary).expect("push");
        assert_eq!(driver.current_context().expect("current"), Some(primary));
        assert_eq!(driver.current_device().expect("current device"), Some(0));
        assert_eq!(driver.pop_context().expect("pop"), Some(primary));
        assert_eq!(driver.current_context().expect("current"), None);
    });
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_context_makes_device_0_current_on_a_fresh_thread() {
    let driver = driver();
    on_fresh_thread(move || {
        assert_eq!(driver.current_context().expect("current"), None);
        let chosen = driver.launch_context().expect("launch context");
        let primary = driver.primary_context(0).expect("primary context");
        assert_eq!(chosen.ordinal, 0);
        assert_eq!(chosen.context, primary);
        assert_eq!(driver.current_context().expect("current"), Some(primary));
        // Asked again, the answer (now from the per-thread cache) is the same.
        assert_eq!(
            driver.launch_context().expect("launch context again"),
            chosen
        );
    });
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn select_device_does_not_grow_the_stack() {
    let driver = driver();
    on_fresh_thread(move || {
        let primary = driver.primary_context(0).expect("primary context");
        assert_eq!(driver.select_device(0).expect("select"), primary);
        assert_eq!(driver.select_device(0).expect("select again"), primary);
        assert_eq!(driver.current_context().expect("current"), Some(primary));
        assert_eq!(driver.current_device().expect("current device"), Some(0));
        assert_eq!(driver.pop_context().expect("pop"), Some(primary));
        assert_eq!(driver.current_context().expect("current"), None);
    });
}

// ---- memory ----

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_memory_round_trips() {
    let driver = on_device_0();
    let (free, total) = driver.memory_info().expect("memory info");
    assert!(total > 0 && free <= total, "free {free} of {total}");

    let empty = DeviceBuffer::alloc(driver, 0).expect("an empty buffer");
    assert!(empty.is_empty());
    assert_eq!(empty.ptr(), 0);

    let len = 4096;
    let buffer = DeviceBuffer::alloc(driver, len).expect("alloc");
    assert_eq!(buffer.len(), len);
    assert_ne!(buffer.ptr(), 0);
    let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    buffer.copy_from_host(&pattern).expect("host to device");
    let mut back = vec![0u8; len];
    buffer.copy_to_host(&mut back).expect("device to host");
    assert_eq!(back, pattern);

    // A shorter copy reads the start of the buffer; a longer one is refused before CUDA.
    let mut head = vec![0u8; 100];
    buffer.copy_to_host(&mut head).expect("a partial copy");
    assert_eq!(head, pattern[..100]);
    let mut too_long = vec![0u8; len + 1];
    assert!(matches!(
        buffer.copy_to_host(&mut too_long),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        buffer.copy_from_host(&too_long),
        Err(Error::Invalid(_))
    ));

    let copy = DeviceBuffer::alloc(driver, len).expect("alloc");
    driver
        .copy_device_to_device(copy.ptr(), buffer.ptr(), len)
        .expect("device to device");
    copy.copy_to_host(&mut back).expect("device to host");
    assert_eq!(back, pattern);

    buffer.fill(0xAB).expect("fill");
    buffer.copy_to_host(&mut back).expect("device to host");
    assert!(back.iter().all(|&b| b == 0xAB));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pointer_device_knows_allocations_not_host_memory() {
    let driver = on_device_0();
    let buffer = DeviceBuffer::alloc(driver, 1024).expect("alloc");
    assert_eq!(driver.pointer_device(buffer.ptr()), Some(0));
    assert_eq!(driver.pointer_device(buffer.ptr() + 512), Some(0));

    let on_stack = 7u64;
    let on_heap = Box::new([0u8; 64]);
    assert_eq!(driver.pointer_device(ptr::addr_of!(on_stack) as u64), None);
    assert_eq!(driver.pointer_device(on_heap.as_ptr() as u64), None);
}

// ---- libraries and launches ----

#[test]
#[ignore = "needs a CUDA GPU"]
fn fill_kernel_launches_with_a_param_buffer() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    // 3 blocks of 128 threads cover 384 elements; only n = 257 of 300 are written.
    let buffer = sentinel_buffer(driver, 300);
    kernels
        .fill(driver, &buffer, 257, 2.5, &dims(3, 128, 0))
        .expect("launch");
    driver.synchronize().expect("synchronize");
    assert_filled(&read_f32s(&buffer), 257, 2.5);

    // The same kernel again, with new values, from the CUfunction of the current context.
    let function = kernels
        .fill
        .function_in_current_context(driver)
        .expect("function");
    assert!(!function.is_null());
    let mut params = TestKernels::fill_params(&buffer, 300, -1.0);
    // SAFETY: `function` is `fill`, taking (.u64, .u32, .f32); `params` holds one pointer
    // per parameter, to slots with those values; the kernel writes 300 f32s, the whole of
    // `buffer`, which lives past the synchronize below.
    unsafe { driver.launch(function, &dims(3, 128, 0), params.as_params()) }.expect("launch");
    driver.synchronize().expect("synchronize");
    assert_filled(&read_f32s(&buffer), 300, -1.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_numba_array_argument_reaches_the_kernel() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let buffer = sentinel_buffer(driver, 8);
    let mut params = ParamBuffer::with_capacity(7);
    // The values need not describe a real array (the kernel only converts them): distinct
    // ones show a slot out of place, and 2^40 that all 64 bits of a slot arrive.
    let cases: [[u64; 6]; 2] = [
        // nitems, itemsize, shape0, stride0, meminfo, parent
        [8, 4, 9, 12, 17, 1 << 40],
        [123_456, 8, 1000, 2048, 5, 6],
    ];
    for [nitems, itemsize, shape0, stride0, meminfo, parent] in cases {
        // Reusing the buffer checks that `as_params` follows what was pushed last.
        params.clear();
        for value in [
            meminfo,
            parent,
            nitems,
            itemsize,
            buffer.ptr(),
            shape0,
            stride0,
        ] {
            params.push_u64(value);
        }
        assert_eq!(params.len(), 7);
        // SAFETY: `numba_array` takes seven .u64 values and `params` holds seven pointers to
        // 8-byte slots; the kernel writes data[0..6], 24 bytes of the 32-byte `buffer`
        // passed as `data`, and dereferences nothing else. `buffer` outlives the
        // synchronize below.
        unsafe {
            driver.launch(
                kernels.numba_array.as_function(),
                &dims(1, 1, 0),
                params.as_params(),
            )
        }
        .expect("launch");
        driver.synchronize().expect("synchronize");
        let values = read_f32s(&buffer);
        let expected = [nitems, itemsize, shape0, stride0, meminfo, parent].map(|v| v as f32);
        assert_eq!(values[..6], expected);
        assert_eq!(values[6].to_bits(), UNTOUCHED);
        assert_eq!(values[7].to_bits(), UNTOUCHED);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_ex_runs_a_cooperative_launch() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let buffer = sentinel_buffer(driver, 300);
    kernels
        .fill_ex(driver, &buffer, 200, 4.0, &dims(1, 256, 0), true, None)
        .expect("cooperative launch of one block");
    driver.synchronize().expect("synchronize");
    assert_filled(&read_f32s(&buffer), 200, 4.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_cooperative_attribute_reaches_the_driver() {
    // A grid larger than the device holds at once is refused only when cooperative.
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let block = 256;
    let per_sm = kernels
        .fill
        .max_active_blocks_per_multiprocessor(driver, block, 0)
        .expect("occupancy");
    let sms = driver
        .device_attribute(0, attribute::MULTIPROCESSOR_COUNT)
        .expect("multiprocessor count");
    assert!(per_sm > 0 && sms > 0);
    let grid = 2 * per_sm as u32 * sms as u32;
    let buffer = sentinel_buffer(driver, 256);
    match kernels.fill_ex(driver, &buffer, 256, 1.0, &dims(grid, block, 0), true, None) {
        Err(Error::Driver { name, .. }) => {
            assert_eq!(name, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")
        }
        other => panic!("a cooperative grid of {grid} x {block}: {other:?}"),
    }
    kernels
        .fill_ex(
            driver,
            &buffer,
            256,
            1.0,
            &dims(grid, block, 0),
            false,
            None,
        )
        .expect("the same grid, not cooperative");
    driver.synchronize().expect("synchronize");
    assert_filled(&read_f32s(&buffer), 256, 1.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_ex_runs_thread_block_clusters() {
    let driver = on_device_0();
    let cluster_launch = attribute::by_name("CLUSTER_LAUNCH").expect("a known name");
    if driver
        .device_attribute(0, cluster_launch)
        .expect("attribute")
        == 0
    {
        eprintln!("device 0 has no thread block clusters: skipped");
        return;
    }
    let kernels = TestKernels::load(driver);
    let buffer = sentinel_buffer(driver, 600);
    kernels
        .fill_ex(
            driver,
            &buffer,
            512,
            3.0,
            &dims(4, 128, 0),
            false,
            Some([2, 1, 1]),
        )
        .expect("4 blocks in clusters of 2");
    driver.synchronize().expect("synchronize");
    assert_filled(&read_f32s(&buffer), 512, 3.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_oversized_block_is_invalid_value_and_the_context_survives() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let buffer = sentinel_buffer(driver, 64);
    let refused = kernels.fill(driver, &buffer, 64, 9.0, &dims(1, 2048, 0));
    match refused {
        Err(Error::Driver { name, during, .. }) => {
            assert_eq!(name, "CUDA_ERROR_INVALID_VALUE");
            assert_eq!(during, "launching a kernel");
        }
        other => panic!("a block of 2048 threads: {other:?}"),
    }
    kernels
        .fill(driver, &buffer, 64, 9.0, &dims(1, 64, 0))
        .expect("a good launch after the refused one");
    driver.synchronize().expect("synchronize");
    assert_filled(&read_f32s(&buffer), 64, 9.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_garbage_image_is_refused() {
    let driver = on_device_0();
    assert!(matches!(Library::load(driver, b""), Err(Error::Invalid(_))));
    // NUL-terminated, so the driver, which is given no length, reads it as (bad) PTX text.
    let garbage = b"this is neither a cubin, a fatbin nor PTX {{ }} ;;\0";
    match Library::load(driver, garbage) {
        Err(Error::Driver { .. }) => {}
        Err(other) => panic!("not a driver error: {other:?}"),
        // Should the driver ever defer compiling to first use, the kernel must not exist.
        Ok(library) => {
            let found = library.kernel("fill");
            assert!(found.is_err(), "a kernel found in garbage: {found:?}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_missing_kernel_is_an_error_naming_it() {
    let driver = on_device_0();
    let library = Library::load(driver, KERNELS_PTX.as_bytes()).expect("loading the PTX");
    let err = library
        .kernel("no_such_kernel")
        .expect_err("a kernel that is not there");
    assert!(matches!(err, Error::Driver { .. }), "{err:?}");
    assert!(err.to_string().contains("no_such_kernel"), "{err}");
    assert!(matches!(library.kernel("fi\0ll"), Err(Error::Invalid(_))));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_attributes_and_occupancy() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let device_max = driver
        .device_attribute(
            0,
            attribute::by_name("MAX_THREADS_PER_BLOCK").expect("name"),
        )
        .expect("device max threads per block");
    let kernel_max = kernels
        .fill
        .attribute(driver, KernelAttribute::MaxThreadsPerBlock, 0)
        .expect("kernel max threads per block");
    assert!(
        kernel_max > 0 && kernel_max <= device_max,
        "kernel {kernel_max}, device {device_max}"
    );
    let blocks = kernels
        .fill
        .max_active_blocks_per_multiprocessor(driver, 128, 0)
        .expect("occupancy");
    let per_sm_threads = driver
        .device_attribute(
            0,
            attribute::by_name("MAX_THREADS_PER_MULTIPROCESSOR").expect("name"),
        )
        .expect("max threads per multiprocessor");
    assert!(blocks > 0, "{blocks} blocks of 128 per multiprocessor");
    assert!(blocks * 128 <= per_sm_threads, "{blocks} blocks of 128");
}

// ---- streams and events ----

#[test]
#[ignore = "needs a CUDA GPU"]
fn streams_and_events_on_a_non_blocking_stream() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let stream = Stream::create(driver, true).expect("stream");
    assert_ne!(stream.handle(), 0);
    assert!(stream.query().expect("query"), "a new stream has no work");

    let start = Event::create(driver, true).expect("event");
    let end = Event::create(driver, true).expect("event");
    let n = 1 << 20;
    let buffer = sentinel_buffer(driver, n);
    driver.synchronize().expect("synchronize the fill");
    start.record(stream.handle()).expect("record start");
    kernels
        .fill(
            driver,
            &buffer,
            n as u32,
            5.0,
            &dims(n as u32 / 256, 256, stream.handle()),
        )
        .expect("launch on the stream");
    end.record(stream.handle()).expect("record end");
    end.synchronize().expect("event synchronize");
    assert!(end.query().expect("event query"));
    stream.synchronize().expect("stream synchronize");
    assert!(stream.query().expect("query"));
    let ms = end.elapsed_since(&start).expect("elapsed time");
    assert!(ms.is_finite() && ms >= 0.0, "{ms} ms");
    assert_filled(&read_f32s(&buffer), n, 5.0);

    // Handles owned elsewhere: the legacy and per-thread default streams.
    for handle in [0, fastlaunch_driver::sys::CU_STREAM_PER_THREAD] {
        let external = Stream::external(driver, handle);
        assert_eq!(external.handle(), handle);
        external
            .synchronize()
            .expect("synchronizing a default stream");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stream_wait_event_orders_two_streams() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let first = Stream::create(driver, true).expect("stream");
    let second = Stream::create(driver, true).expect("stream");
    let done = Event::create(driver, false).expect("event");
    let n = 1 << 22;
    let buffer = sentinel_buffer(driver, n);
    driver.synchronize().expect("synchronize the fill");
    let grid = dims(n as u32 / 256, 256, first.handle());
    // Several writes of 1.0 on the first stream, then one of 2.0 on the second that must
    // wait for them; without the wait the second's writes could land first.
    for _ in 0..4 {
        kernels
            .fill(driver, &buffer, n as u32, 1.0, &grid)
            .expect("launch on the first stream");
    }
    done.record(first.handle()).expect("record");
    second.wait_event(&done).expect("wait event");
    kernels
        .fill(
            driver,
            &buffer,
            n as u32,
            2.0,
            &LaunchDims {
                stream: second.handle(),
                ..grid
            },
        )
        .expect("launch on the second stream");
    second.synchronize().expect("synchronize the second stream");
    assert!(
        done.query().expect("event query"),
        "waited-for event not done"
    );
    first.synchronize().expect("synchronize the first stream");
    assert_filled(&read_f32s(&buffer), n, 2.0);
}

// ---------------------------------------------------------------- the memory layer

#[test]
#[ignore = "needs a CUDA GPU"]
fn pool_allocations_round_trip_through_the_staging_ring() {
    use fastlaunch_driver::memory::SLOT_BYTES;
    use fastlaunch_driver::{MemoryPool, StagingRing};

    let driver = on_device_0();
    let stream = Stream::create(driver, false).unwrap();
    let pool = MemoryPool::create(driver, 0).unwrap();
    let ring = StagingRing::new(driver);
    for len in [1usize, 32 * 1024, SLOT_BYTES, 3 << 20] {
        let host: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let device = driver
            .alloc_from_pool_async(pool, len, stream.handle())
            .unwrap();
        let mut back = vec![0u8; len];
        if StagingRing::stages(len) {
            let mut slot = ring.claim().expect("a free slot");
            slot.wait_free().unwrap();
            // SAFETY: `device` holds `len` bytes until it is freed below, after the copies.
            unsafe { slot.to_device(device, &host, stream.handle()) }.unwrap();
            slot.wait_free().unwrap();
            // SAFETY: as above.
            unsafe { slot.to_host_on(device, &mut back, stream.handle()) }.unwrap();
        } else {
            // SAFETY: as above.
            unsafe {
                driver
                    .copy_host_to_device_unstaged(device, &host, stream.handle())
                    .unwrap();
                driver
                    .copy_device_to_host_unstaged(&mut back, device, stream.handle())
                    .unwrap();
            }
        }
        assert_eq!(back, host, "{len} bytes");
        driver.free_async(device, stream.handle()).unwrap();
    }
    stream.synchronize().unwrap();
    if let Some(pool) = pool {
        pool.destroy(driver).unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_pools_release_threshold_is_set_and_read() {
    let driver = on_device_0();
    let pool = driver.memory_pool(0).unwrap();
    let before = pool.release_threshold(driver).unwrap();
    pool.set_release_threshold(driver, 1 << 30).unwrap();
    assert_eq!(pool.release_threshold(driver).unwrap(), 1 << 30);
    pool.set_release_threshold(driver, before).unwrap();
    let pointer = driver.alloc_async(1 << 20, 0).unwrap();
    assert!(pool.usage(driver).unwrap().used >= 1 << 20);
    driver.free_async(pointer, 0).unwrap();
    driver.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_free_after_another_stream_waits_for_its_work() {
    let driver = on_device_0();
    let kernels = TestKernels::load(driver);
    let (first, second) = (
        Stream::create(driver, true).unwrap(),
        Stream::create(driver, true).unwrap(),
    );
    let words = 1u32 << 16;
    let len = words as usize * 4;
    let result = DeviceBuffer::alloc(driver, len).unwrap();
    let pointer = driver.alloc_async(len, first.handle()).unwrap();
    // SAFETY: `pointer` holds `len` bytes until the free below, which follows this work.
    unsafe { driver.memset_async(pointer, 0x11, len, first.handle()) }.unwrap();
    // SAFETY: `result` and `pointer` hold `words` u32s until the kernel has run (`result`
    // lives to the end; `pointer`'s free below is ordered after the kernel).
    unsafe {
        kernels.spin_copy(
            driver,
            result.ptr(),
            pointer,
            words,
            50_000_000,
            first.handle(),
        )
    }
    .unwrap();
    // what the extension's ordering does: an event recorded after the work on `first`, waited
    // for on the stream the free is enqueued on
    let used = Event::create(driver, false).unwrap();
    used.record(first.handle()).unwrap();
    driver
        .stream_wait_event(second.handle(), used.handle())
        .unwrap();
    driver.free_async(pointer, second.handle()).unwrap();
    // The pool may hand the same memory out again on `second` at once; writing it there must
    // wait for the kernel on `first` that still reads it.
    let reused = driver.alloc_async(len, second.handle()).unwrap();
    // SAFETY: `reused` holds `len` bytes until its free below.
    unsafe { driver.memset_async(reused, 0x22, len, second.handle()) }.unwrap();
    // Not asserted: that the kernel still runs here (it spins about 300 ms on an H200). Run
    // alone it does; beside other tests, a synchronizing call on another thread (cuMemFree, a
    // library load) can hold this thread's driver calls until the device is idle.
    second.synchronize().unwrap();
    first.synchronize().unwrap();
    let mut copied = vec![0u8; len];
    result.copy_to_host(&mut copied).unwrap();
    assert!(
        copied.iter().all(|&b| b == 0x11),
        "the kernel read memory written after its free (reused: {})",
        reused == pointer
    );
    driver.free_async(reused, second.handle()).unwrap();
    second.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn streams_and_events_by_raw_handle() {
    let driver = on_device_0();
    let blocking = driver.create_stream(false).unwrap();
    let non_blocking = driver.create_stream(true).unwrap();
    assert_eq!(driver.stream_flags(blocking).unwrap(), 0);
    assert_eq!(
        driver.stream_flags(non_blocking).unwrap(),
        fastlaunch_driver::STREAM_NON_BLOCKING
    );
    let (start, end) = (
        driver.create_event(true).unwrap(),
        driver.create_event(true).unwrap(),
    );
    driver.record_event(start, non_blocking).unwrap();
    let pointer = driver.alloc_async(64 << 20, non_blocking).unwrap();
    // SAFETY: `pointer` holds 64 MiB until its free, ordered after this.
    unsafe { driver.memset_async(pointer, 3, 64 << 20, non_blocking) }.unwrap();
    driver.record_event(end, non_blocking).unwrap();
    driver.stream_wait_event(blocking, end).unwrap();
    driver.free_async(pointer, blocking).unwrap();
    driver.stream_synchronize(blocking).unwrap();
    assert!(driver.event_query(end).unwrap());
    driver.event_synchronize(end).unwrap();
    let ms = driver.event_elapsed_ms(start, end).unwrap();
    assert!(ms.is_finite() && ms >= 0.0, "{ms} ms");
    assert!(driver.stream_query(non_blocking).unwrap());
    // SAFETY: created above, destroyed once, not used after.
    unsafe {
        driver.destroy_event(start).unwrap();
        driver.destroy_event(end).unwrap();
        driver.destroy_stream(blocking).unwrap();
        driver.destroy_stream(non_blocking).unwrap();
    }
}
