//! Device buffers and their transfers.

use cubecl::prelude::*;
use cubecl::server::Handle;

/// Why a device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("reading a device buffer failed: {0}")]
    Read(String),
    #[error("{0}")]
    Input(String),
    #[error("no device kernel for compressor `{0}`: it compresses on the host")]
    Unsupported(String),
}

/// An f32 vector in device memory.
#[derive(Clone, Debug)]
pub struct DeviceF32 {
    pub handle: Handle,
    pub len: usize,
}

impl DeviceF32 {
    /// Uploads `values`.
    pub fn upload(client: &Client, values: &[f32]) -> Self {
        Self { handle: client.create_from_slice(f32::as_bytes(values)), len: values.len() }
    }

    /// A vector of `len` zeros.
    pub fn zeros(client: &Client, len: usize) -> Self {
        Self::upload(client, &vec![0.0; len])
    }

    /// Wraps a handle that holds at least `len` f32 values (a burn tensor's
    /// buffer, for example).
    pub fn from_handle(handle: Handle, len: usize) -> Self {
        Self { handle, len }
    }

    /// Copies the vector to the host.
    pub fn read(&self, client: &Client) -> Result<Vec<f32>, KernelError> {
        read_f32s(client, &self.handle, self.len)
    }

    pub(crate) fn arg(&self) -> BufferArg {
        f32_arg(&self.handle, self.len)
    }
}

/// The bytes of a device buffer.
pub(crate) fn read_bytes(client: &Client, handle: &Handle) -> Result<Vec<u8>, KernelError> {
    let bytes = client.read_one(handle.clone()).map_err(|e| KernelError::Read(format!("{e:?}")))?;
    Ok(bytes.to_vec())
}

/// The first `len` values of type `T` in `handle`; an error (not a panic)
/// when the buffer is shorter, as a foreign handle from `from_handle` may be.
/// Read unaligned: the host copy is a byte vector with no alignment promise.
fn read_values<T: bytemuck::Pod>(
    client: &Client,
    handle: &Handle,
    len: usize,
) -> Result<Vec<T>, KernelError> {
    let bytes = read_bytes(client, handle)?;
    let size = std::mem::size_of::<T>();
    let held = bytes.len() / size;
    if held < len {
        return Err(KernelError::Read(format!("the buffer holds {held} values, {len} were expected")));
    }
    Ok(bytes.chunks_exact(size).take(len).map(bytemuck::pod_read_unaligned).collect())
}

/// The first `n` bytes of `handle`: a packed payload written in whole words.
pub(crate) fn read_prefix(client: &Client, handle: &Handle, n: usize) -> Result<Vec<u8>, KernelError> {
    read_values(client, handle, n)
}

/// `len` f32 values read from `handle`.
pub(crate) fn read_f32s(client: &Client, handle: &Handle, len: usize) -> Result<Vec<f32>, KernelError> {
    read_values(client, handle, len)
}

/// `len` u32 values read from `handle`.
pub(crate) fn read_u32s(client: &Client, handle: &Handle, len: usize) -> Result<Vec<u32>, KernelError> {
    read_values(client, handle, len)
}

/// A device buffer of `len` u32 values, zeroed.
pub(crate) fn zeros_u32(client: &Client, len: usize) -> Handle {
    client.create_from_slice(u32::as_bytes(&vec![0u32; len.max(1)]))
}

/// A buffer argument over `len` u32 values of `handle`.
pub(crate) fn u32_arg(handle: &Handle, len: usize) -> BufferArg {
    // SAFETY: every caller created `handle` with at least `len` u32 values
    // (`len.max(1)`: an empty binding is invalid on some backends, and every
    // caller allocates at least one word).
    unsafe { BufferArg::from_raw_parts(handle.clone(), len.max(1)) }
}

/// A buffer argument over `len` f32 values of `handle`.
pub(crate) fn f32_arg(handle: &Handle, len: usize) -> BufferArg {
    // SAFETY: every caller created `handle` with at least `len` f32 values
    // (or, for `DeviceF32::from_handle`, holds the caller's promise of it).
    unsafe { BufferArg::from_raw_parts(handle.clone(), len) }
}
