//! The object-store port (write once, never overwrite) and its S3 adapter.

use std::future::Future;

use aws_sdk_s3::error::ProvideErrorMetadata;

use crate::error::{AwsError, error_chain};
use crate::payload::{MAX_PAYLOAD_BYTES, Payload, Pointer};
use aws_sdk_s3::primitives::ByteStream;

/// What a conditional put found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was written.
    Created,
    /// An object already had that key; it was left as it was.
    AlreadyExists,
}

/// Writes objects that must never be overwritten (archive entries, order records, keep
/// lists), and reads them back.
pub trait ObjectStore: Send + Sync {
    /// Writes `body` at `key` unless an object is already there (`If-None-Match: *`).
    fn put_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<PutOutcome, AwsError>> + Send;

    /// Reads an object; `None` when there is none at `key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, AwsError>> + Send;

    /// Every key under `prefix`, in key order.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, AwsError>> + Send;

    /// The first key under `prefix` in key order (a state log's newest entry), `None` when
    /// there is none.
    fn first_key(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Option<String>, AwsError>> + Send {
        async move { Ok(self.list(prefix).await?.into_iter().next()) }
    }

    /// The bucket it writes into (what a pointer to a stored payload names).
    fn bucket(&self) -> &str;

    /// The payload an extended-client pointer names, in any bucket the function may read.
    fn payload(&self, pointer: &Pointer) -> impl Future<Output = Result<Payload, AwsError>> + Send;
}

fn store_error<E>(err: &aws_sdk_s3::error::SdkError<E>, what: String) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let code = err.code().map(str::to_owned);
    AwsError {
        kind: crate::error::kind_of(err, code.is_some()),
        code,
        message: format!("{what}: {}", error_chain(err)),
    }
}

/// [`ObjectStore`] on an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Store {
    /// An adapter writing into `bucket`.
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// Reads an object that should be there: a missing one is the service's `NoSuchKey`
    /// error, where [`ObjectStore::get`] answers `None` (the operator's `resq archive show`).
    pub async fn read(&self, key: &str) -> Result<Vec<u8>, AwsError> {
        Ok(self.object(key, false).await?.unwrap_or_default())
    }

    /// An object's bytes; `None` for a missing one when `missing_is_none`.
    async fn object(&self, key: &str, missing_is_none: bool) -> Result<Option<Vec<u8>>, AwsError> {
        match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out
                .body
                .collect()
                .await
                .map(|b| Some(b.into_bytes().to_vec()))
                .map_err(|e| AwsError::local(format!("s3://{}/{key}: {e}", self.bucket))),
            Err(err)
                if missing_is_none
                    && err.as_service_error().is_some_and(|e| e.is_no_such_key()) =>
            {
                Ok(None)
            }
            Err(err) => Err(store_error(&err, format!("s3://{}/{key}", self.bucket))),
        }
    }
}

impl S3Store {
    /// Whether a listing shows the pointer's key (`None`: the listing failed).
    async fn listed(&self, pointer: &Pointer) -> Option<bool> {
        let out = self.client.list_objects_v2().bucket(&pointer.bucket);
        let out = out.prefix(&pointer.key).max_keys(1).send().await.ok()?;
        Some(out.contents().iter().any(|o| o.key() == Some(&pointer.key)))
    }
}

impl ObjectStore for S3Store {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    async fn payload(&self, pointer: &Pointer) -> Result<Payload, AwsError> {
        let at = format!("s3://{}/{}", pointer.bucket, pointer.key);
        let out = self
            .client
            .get_object()
            .bucket(&pointer.bucket)
            .key(&pointer.key)
            .send()
            .await;
        let out = match out {
            Ok(out) => out,
            Err(err) if matches!(err.code(), Some("NoSuchKey" | "NoSuchBucket")) => {
                return Ok(Payload::Missing);
            }
            // S3 answers a missing key 403 to a reader that may not list the bucket: a listing
            // of the key says whether it is there (a role that may not list keeps the 403)
            Err(err) if err.code() == Some("AccessDenied") => {
                return match self.listed(pointer).await {
                    Some(false) => Ok(Payload::Missing),
                    _ => Err(store_error(&err, at)),
                };
            }
            Err(err) => return Err(store_error(&err, at)),
        };
        let size = out.content_length().unwrap_or(0).max(0) as u64;
        if size > MAX_PAYLOAD_BYTES {
            return Ok(Payload::TooLarge(size));
        }
        let bytes = out.body.collect().await;
        let bytes = bytes.map_err(|e| AwsError::local(format!("{at}: {e}")))?;
        Ok(Payload::Found(bytes.into_bytes().into()))
    }

    async fn first_key(&self, prefix: &str) -> Result<Option<String>, AwsError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .max_keys(1)
            .send()
            .await
            .map_err(|e| store_error(&e, format!("listing s3://{}/{prefix}", self.bucket)))?;
        Ok(out
            .contents()
            .first()
            .and_then(|o| o.key())
            .map(str::to_owned))
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, AwsError> {
        self.object(key, true).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, AwsError> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| store_error(&e, format!("listing s3://{}/{prefix}", self.bucket)))?;
            keys.extend(
                out.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
            match out.next_continuation_token() {
                Some(t) => token = Some(t.to_owned()),
                None => break,
            }
        }
        Ok(keys)
    }

    async fn put_if_absent(&self, key: &str, body: Vec<u8>) -> Result<PutOutcome, AwsError> {
        let result = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .if_none_match("*")
            .body(ByteStream::from(body))
            .send()
            .await;
        match result {
            Ok(_) => Ok(PutOutcome::Created),
            Err(err) => {
                let status = err.raw_response().map(|r| r.status().as_u16());
                if status == Some(412) || err.code() == Some("PreconditionFailed") {
                    return Ok(PutOutcome::AlreadyExists);
                }
                Err(AwsError {
                    kind: crate::error::kind_of(&err, err.code().is_some() || status.is_some()),
                    code: err
                        .code()
                        .map(str::to_owned)
                        .or_else(|| status.map(|s| format!("HTTP{s}"))),
                    message: format!("s3://{}/{key}: {}", self.bucket, error_chain(&err)),
                })
            }
        }
    }
}

impl<T: ObjectStore> ObjectStore for std::sync::Arc<T> {
    fn put_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<PutOutcome, AwsError>> + Send {
        (**self).put_if_absent(key, body)
    }

    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, AwsError>> + Send {
        (**self).get(key)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, AwsError>> + Send {
        (**self).list(prefix)
    }

    fn first_key(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Option<String>, AwsError>> + Send {
        (**self).first_key(prefix)
    }

    fn bucket(&self) -> &str {
        (**self).bucket()
    }

    fn payload(&self, pointer: &Pointer) -> impl Future<Output = Result<Payload, AwsError>> + Send {
        (**self).payload(pointer)
    }
}

impl<T: ObjectStore> ObjectStore for &T {
    fn put_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<PutOutcome, AwsError>> + Send {
        (**self).put_if_absent(key, body)
    }

    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, AwsError>> + Send {
        (**self).get(key)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, AwsError>> + Send {
        (**self).list(prefix)
    }

    fn first_key(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Option<String>, AwsError>> + Send {
        (**self).first_key(prefix)
    }

    fn bucket(&self) -> &str {
        (**self).bucket()
    }

    fn payload(&self, pointer: &Pointer) -> impl Future<Output = Result<Payload, AwsError>> + Send {
        (**self).payload(pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::Client;
    use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
    use aws_sdk_s3::types::Object;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    /// S3's answer to a GetObject of a missing key from a role that may not list the bucket
    /// (moto answers 404 NoSuchKey whatever the role: only a stand-in can give this one).
    fn denied() -> HttpResponse {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
        HttpResponse::new(StatusCode::try_from(403).unwrap(), SdkBody::from(body))
    }

    #[tokio::test]
    async fn a_payload_answered_403_is_missing_only_when_a_listing_says_it_is_not_there() {
        let pointer = Pointer {
            bucket: "producer-payloads".into(),
            key: "k1".into(),
        };
        for (listed, missing) in [(None, true), (Some("k1"), false)] {
            // GIVEN GetObject answers 403, and a listing of the key finds it or not
            let get = mock!(Client::get_object).then_http_response(denied);
            let list = mock!(Client::list_objects_v2).then_output(move || {
                let found = listed.map(|k| Object::builder().key(k).build());
                ListObjectsV2Output::builder()
                    .set_contents(found.map(|o| vec![o]))
                    .build()
            });
            let client = mock_client!(aws_sdk_s3, RuleMode::MatchAny, [&get, &list]);
            // WHEN the payload is read
            let read = S3Store::new(client, "archive").payload(&pointer).await;
            // THEN no object is PAYLOAD_NOT_FOUND's Missing; one there keeps the 403 (a role
            // that may not read it: transient)
            match missing {
                true => assert_eq!(read, Ok(Payload::Missing)),
                false => {
                    let e = read.unwrap_err();
                    assert_eq!(e.code.as_deref(), Some("AccessDenied"), "{e}");
                }
            }
            assert_eq!((get.num_calls(), list.num_calls()), (1, 1));
        }
    }
}
