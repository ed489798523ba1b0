//! The dense baseline's device form: the gradient read back as it is.

use gradcomp_compress::{CompressorConfig, Message, UnitContext};

use crate::buffer::{DeviceF32, KernelError};
use crate::form::DeviceForm;
use crate::Client;

#[derive(Debug)]
struct Dense;

/// The registry's line for `dense`.
pub(crate) fn form(config: &CompressorConfig, _shape: &[usize]) -> Option<Box<dyn DeviceForm>> {
    matches!(config, CompressorConfig::Dense(_)).then(|| Box::new(Dense) as Box<dyn DeviceForm>)
}

impl DeviceForm for Dense {
    fn compress(
        &mut self,
        client: &Client,
        g: &DeviceF32,
        _: &UnitContext,
        out: &mut Message,
    ) -> Result<(), KernelError> {
        out.dense_mut().values = g.read(client)?;
        Ok(())
    }
}
