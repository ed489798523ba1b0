//! The dense baseline's device form: the gradient read back as it is.

use gradcomp_compress::config::DenseConfig;
use gradcomp_compress::CompressorConfig;

use crate::form::{stateless, DeviceForm};

/// The registry's line for `dense`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    let CompressorConfig::Dense(c) = config else { return None };
    stateless(c, |client, g, _: &DenseConfig, _, out| {
        out.dense_mut().values = g.read(client)?;
        Ok(())
    })
}
