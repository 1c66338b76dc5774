//! The bearer token on every call: the interceptor that adds it, and the
//! channel type with it ([`Authed`]), below the calls (`wire`) and the
//! hand-framed `ProcessShard` stream (`chunks`) that both send through it.

use stoker_core::Secret;
use stoker_proto::transport;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Adds `authorization: Bearer <token>` to every request when configured.
#[derive(Clone)]
pub(crate) struct Auth {
    header: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Auth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            request.metadata_mut().insert(transport::AUTHORIZATION, h.clone());
        }
        Ok(request)
    }
}

/// A channel with the token added to every request.
pub(super) type Authed = InterceptedService<Channel, Auth>;

pub(super) fn auth(token: Option<&Secret>) -> Result<Auth, String> {
    let header = token
        .map(|t| {
            let mut v = MetadataValue::try_from(transport::bearer(t.expose()))
                .map_err(|_| "token is not a valid header value".to_owned())?;
            v.set_sensitive(true);
            Ok::<_, String>(v)
        })
        .transpose()?;
    Ok(Auth { header })
}
