//! The wire's constants, the header every message starts with, and
//! [`CodecError`]: why bytes could not be decoded.

use thiserror::Error;

use crate::message::MessageKind;

pub const MAGIC: u8 = 0x67;
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 12;

pub(super) const FLAG_BASE3: u8 = 0x01;
pub(super) const FLAG_VARINT: u8 = 0x01;
pub(super) const FLAG_F16: u8 = 0x02;
/// A blockwise message's flags are its codebook's id (`BlockCodebook`).
pub(super) const FLAG_CODEBOOK: u8 = 0x03;
/// A chunked message's entries are DCT coefficients.
pub(super) const FLAG_DCT: u8 = 0x01;

/// Most workers a TernarySum can describe (sums are held in i16).
pub const MAX_WORKERS: u32 = i16::MAX as u32;

/// Why bytes could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    #[error("message truncated: {what} needs {needed} bytes but {available} remain")]
    Truncated { what: &'static str, needed: usize, available: usize },
    #[error("not a gradcomp message: first byte {0:#04x}, expected 0x67")]
    BadMagic(u8),
    #[error("wire version {0} is not supported (this build speaks version 1); run the same gradcomp version on every worker")]
    Version(u8),
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("unknown flag bits {flags:#04x} on a {kind:?} message")]
    Flags { kind: MessageKind, flags: u8 },
    #[error("{what}: expected {expected} bytes, got {got}")]
    Length { what: &'static str, expected: usize, got: usize },
    #[error("invalid message: {0}")]
    Invalid(&'static str),
    #[error("sparse index {index} is out of range for a unit of {len} elements")]
    IndexOutOfRange { index: u64, len: u32 },
    #[error("{0} bytes follow the message")]
    TrailingBytes(usize),
    #[error("message describes {got} elements but the buffer holds {expected}")]
    LenMismatch { expected: usize, got: usize },
}

/// The fixed part of every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: MessageKind,
    pub flags: u8,
    /// Logical element count of the unit.
    pub len: u32,
    /// Which compression unit this is (tensor index, or 0 for `global`).
    pub unit: u32,
}
