//! The object-store port (write once, never overwrite) and its S3 adapter.

use std::future::Future;

use aws_sdk_s3::error::ProvideErrorMetadata;

use crate::sqs::error_chain;
use aws_sdk_s3::primitives::ByteStream;

/// What a conditional put found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was written.
    Created,
    /// An object already had that key; it was left as it was.
    AlreadyExists,
}

/// A read or write that did not happen: the one AWS error type of resq, its message naming the
/// object. Always worth retrying from resq's point of view: the caller reports the message
/// failed rather than dropping it.
pub type StoreError = crate::sqs::AwsError;

/// Writes objects that must never be overwritten (archive entries, order records, keep
/// lists), and reads them back.
pub trait ObjectStore: Send + Sync {
    /// Writes `body` at `key` unless an object is already there (`If-None-Match: *`).
    fn put_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<PutOutcome, StoreError>> + Send;

    /// Reads an object; `None` when there is none at `key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Every key under `prefix`, in key order.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
}

fn store_error<E>(err: &aws_sdk_s3::error::SdkError<E>, what: String) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let code = err.code().map(str::to_owned);
    StoreError {
        kind: crate::sqs::kind_of(err, code.is_some()),
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
}

impl ObjectStore for S3Store {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
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
                .map_err(|e| StoreError::local(format!("s3://{}/{key}: {e}", self.bucket))),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => Ok(None),
            Err(err) => Err(store_error(&err, format!("s3://{}/{key}", self.bucket))),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
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

    async fn put_if_absent(&self, key: &str, body: Vec<u8>) -> Result<PutOutcome, StoreError> {
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
                Err(StoreError {
                    kind: crate::sqs::kind_of(&err, err.code().is_some() || status.is_some()),
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

/// An in-memory [`ObjectStore`] for tests and benchmarks; can be told to fail.
#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: std::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>>,
    failing: std::sync::atomic::AtomicBool,
    puts: std::sync::atomic::AtomicU64,
}

impl MemoryStore {
    /// Makes every following put fail (`true`) or succeed again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    /// A copy of the stored objects.
    pub fn objects(&self) -> std::collections::BTreeMap<String, Vec<u8>> {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Keys stored under `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.objects()
            .into_keys()
            .filter(|k| k.starts_with(prefix))
            .collect()
    }

    /// Put attempts so far (written, found existing or failed).
    pub fn puts(&self) -> u64 {
        self.puts.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl ObjectStore for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::service(
                "InternalError",
                format!("{key}: injected failure"),
            ));
        }
        Ok(self.objects().get(key).cloned())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::service(
                "InternalError",
                format!("{prefix}: injected failure"),
            ));
        }
        Ok(self.keys(prefix))
    }

    async fn put_if_absent(&self, key: &str, body: Vec<u8>) -> Result<PutOutcome, StoreError> {
        self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::service(
                "InternalError",
                format!("{key}: injected failure"),
            ));
        }
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        if objects.contains_key(key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        objects.insert(key.to_owned(), body);
        Ok(PutOutcome::Created)
    }
}

impl<T: ObjectStore> ObjectStore for std::sync::Arc<T> {
    fn put_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<PutOutcome, StoreError>> + Send {
        (**self).put_if_absent(key, body)
    }

    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send {
        (**self).get(key)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        (**self).list(prefix)
    }
}

impl<T: ObjectStore> ObjectStore for &T {
    fn put_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<PutOutcome, StoreError>> + Send {
        (**self).put_if_absent(key, body)
    }

    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send {
        (**self).get(key)
    }

    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        (**self).list(prefix)
    }
}
