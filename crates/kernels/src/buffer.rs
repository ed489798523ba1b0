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
        let bytes = read_bytes(client, &self.handle)?;
        Ok(f32::from_bytes(&bytes)[..self.len].to_vec())
    }

    pub(crate) fn arg(&self) -> BufferArg {
        // SAFETY: `len` is the element count the handle was created with
        // (or, for `from_handle`, the caller's promise that it holds that many).
        unsafe { BufferArg::from_raw_parts(self.handle.clone(), self.len) }
    }
}

/// The bytes of a device buffer.
pub(crate) fn read_bytes(client: &Client, handle: &Handle) -> Result<Vec<u8>, KernelError> {
    let bytes = client.read_one(handle.clone()).map_err(|e| KernelError::Read(format!("{e:?}")))?;
    Ok(bytes.to_vec())
}

/// A device buffer of `len` u32 values, zeroed.
pub(crate) fn zeros_u32(client: &Client, len: usize) -> Handle {
    client.create_from_slice(u32::as_bytes(&vec![0u32; len.max(1)]))
}

/// `len` u32 values read from `handle`.
pub(crate) fn read_u32s(client: &Client, handle: &Handle, len: usize) -> Result<Vec<u32>, KernelError> {
    let bytes = read_bytes(client, handle)?;
    Ok(u32::from_bytes(&bytes)[..len].to_vec())
}

/// A buffer argument over `len` u32 values of `handle`.
pub(crate) fn u32_arg(handle: &Handle, len: usize) -> BufferArg {
    // SAFETY: every caller created `handle` with at least `len` u32 values.
    unsafe { BufferArg::from_raw_parts(handle.clone(), len.max(1)) }
}
