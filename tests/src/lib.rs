//! Helpers for resq's end-to-end tests: a local AWS started on 127.0.0.1 (a free port) and
//! stopped afterwards — moto, or LocalStack with `E2E_EMULATOR=localstack` (`make test` runs
//! the suite on both) — SDK clients pointed at it, and the queues and bucket of a resq stack.
#![warn(missing_docs)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use aws_sdk_sqs::types::{Message, QueueAttributeName};

pub use resq_local::emulator::{Emulator, EmulatorKind, Installs, MotoServer, REGION};

/// Where the moto server binary is: `MOTO_SERVER`, else the workspace's `.venv`.
pub fn moto_binary() -> PathBuf {
    std::env::var_os("MOTO_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/moto_server")
        })
}

/// LocalStack's Python: `LOCALSTACK_PYTHON`, else the workspace's `.venv-localstack`.
pub fn localstack_python() -> PathBuf {
    std::env::var_os("LOCALSTACK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-localstack/bin/python")
        })
}

/// Starts moto for one test (stopped when the handle drops).
pub fn moto() -> MotoServer {
    MotoServer::start(&moto_binary())
        .unwrap_or_else(|e| panic!("{e}; set MOTO_SERVER to use another install"))
}

/// The emulator this run of the suite uses: `E2E_EMULATOR` (`moto`, the default, or
/// `localstack`).
pub fn emulator_kind() -> EmulatorKind {
    match std::env::var("E2E_EMULATOR").as_deref() {
        Ok("localstack") => EmulatorKind::Localstack,
        Ok("moto") | Err(_) => EmulatorKind::Moto,
        Ok(other) => panic!("E2E_EMULATOR={other}: use moto or localstack"),
    }
}

/// Where the emulators are installed.
pub fn installs() -> Installs {
    Installs {
        moto_server: moto_binary(),
        localstack_python: localstack_python(),
    }
}

/// Starts this run's emulator for one test (stopped when the handle drops).
pub fn emulator() -> Emulator {
    Emulator::start(emulator_kind(), &installs()).unwrap_or_else(|e| {
        panic!("{e}; set MOTO_SERVER or LOCALSTACK_PYTHON to use another install")
    })
}

/// A queue of the stack.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Its URL.
    pub url: String,
    /// Its ARN.
    pub arn: String,
}

/// The emulator plus a resq stack on it: main queue, DLQ, archive bucket.
pub struct Stack {
    /// The emulator (stopped on drop).
    pub emulator: Emulator,
    /// SQS client.
    pub sqs: aws_sdk_sqs::Client,
    /// S3 client.
    pub s3: aws_sdk_s3::Client,
    /// CloudWatch client (alarms).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// The main queue.
    pub main: Queue,
    /// Its dead-letter queue.
    pub dlq: Queue,
    /// The archive bucket.
    pub bucket: String,
}

/// Options for [`Stack::start`].
#[derive(Debug, Clone, Copy)]
pub struct StackOptions {
    /// FIFO queues (`orders.fifo`, `orders-dlq.fifo`).
    pub fifo: bool,
    /// The main queue's `maxReceiveCount`.
    pub max_receive_count: u32,
    /// The main queue's visibility timeout in seconds.
    pub visibility_timeout: u32,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            fifo: false,
            max_receive_count: 5,
            visibility_timeout: 120,
        }
    }
}

impl Stack {
    /// Starts the emulator and creates the stack.
    pub async fn start(options: StackOptions) -> Self {
        let emulator = emulator();
        let config = emulator.sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let s3 = resq::aws::s3_client(&config);
        let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
        let suffix = if options.fifo { ".fifo" } else { "" };
        let dlq = create_queue(
            &sqs,
            &format!("orders-dlq{suffix}"),
            options.fifo,
            HashMap::new(),
        )
        .await;
        let redrive = serde_json::json!({"deadLetterTargetArn": dlq.arn, "maxReceiveCount": options.max_receive_count.to_string()});
        let main = create_queue(
            &sqs,
            &format!("orders{suffix}"),
            options.fifo,
            HashMap::from([
                (QueueAttributeName::RedrivePolicy, redrive.to_string()),
                (
                    QueueAttributeName::VisibilityTimeout,
                    options.visibility_timeout.to_string(),
                ),
            ]),
        )
        .await;
        let bucket = "resq-archive".to_owned();
        s3.create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("create bucket");
        // versioned, like the template's bucket (the audits count writes by versions)
        s3.put_bucket_versioning()
            .bucket(&bucket)
            .versioning_configuration(
                aws_sdk_s3::types::VersioningConfiguration::builder()
                    .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .expect("enable versioning");
        Self {
            emulator,
            sqs,
            s3,
            cloudwatch,
            main,
            dlq,
            bucket,
        }
    }

    /// The environment a function of this stack gets (docs/design.md, "Configuration" names).
    pub fn env(&self) -> HashMap<String, String> {
        HashMap::from([
            ("MAIN_QUEUE_URL".into(), self.main.url.clone()),
            ("DLQ_URL".into(), self.dlq.url.clone()),
            ("ARCHIVE_BUCKET".into(), self.bucket.clone()),
        ])
    }

    /// Receives up to `max` messages (≤ 10) with every attribute, as Lambda's poller does.
    pub async fn receive(&self, queue: &Queue, max: i32) -> Vec<Message> {
        resq::sqs::receive(&self.sqs, &queue.url, max, None, 0)
            .await
            .expect("receive")
    }

    /// Receives until `count` messages arrived or nothing more comes.
    pub async fn receive_n(&self, queue: &Queue, count: usize) -> Vec<Message> {
        let mut all = Vec::new();
        let mut empty = 0;
        while all.len() < count && empty < 3 {
            let got = self
                .receive(queue, (count - all.len()).min(10) as i32)
                .await;
            if got.is_empty() {
                empty += 1;
            }
            all.extend(got);
        }
        all
    }

    /// Deletes messages (what Lambda does with the records not reported failed).
    pub async fn delete(&self, queue: &Queue, messages: &[&Message]) {
        for m in messages {
            self.sqs
                .delete_message()
                .queue_url(&queue.url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
    }

    /// `ApproximateNumberOfMessages` + `…NotVisible` of a queue.
    pub async fn depth(&self, queue: &Queue) -> (u64, u64) {
        resq_ops::status::depth(&self.sqs, &queue.url)
            .await
            .expect("queue attributes")
    }

    /// Keys in the bucket under `prefix`.
    pub async fn keys(&self, prefix: &str) -> Vec<String> {
        self.keys_in(&self.bucket, prefix).await
    }

    /// The keys under `prefix` in `bucket` (one of the test's own).
    pub async fn keys_in(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let out = self
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .send()
            .await
            .expect("list objects");
        out.contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    }

    /// An object's body as JSON.
    pub async fn json_object(&self, key: &str) -> serde_json::Value {
        self.json_object_in(&self.bucket, key).await
    }

    /// The JSON object at `key` in `bucket` (one of the test's own).
    pub async fn json_object_in(&self, bucket: &str, key: &str) -> serde_json::Value {
        let bytes = self.object_in(bucket, key).await;
        serde_json::from_slice(&bytes).expect("object is JSON")
    }

    /// The object at `key` in the stack's bucket.
    pub async fn object(&self, key: &str) -> Vec<u8> {
        self.object_in(&self.bucket, key).await
    }

    /// The object at `key` in `bucket` (one of the test's own).
    pub async fn object_in(&self, bucket: &str, key: &str) -> Vec<u8> {
        let out = self.s3.get_object().bucket(bucket).key(key).send().await;
        let out = out.expect("get object");
        let bytes = out.body.collect().await.expect("read object").into_bytes();
        bytes.to_vec()
    }
}

async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    fifo: bool,
    mut attributes: HashMap<QueueAttributeName, String>,
) -> Queue {
    if fifo {
        attributes.insert(QueueAttributeName::FifoQueue, "true".into());
    }
    let url = sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .expect("create queue")
        .queue_url
        .expect("queue url");
    let arn = resq_ops::status::queue_arn(sqs, &url)
        .await
        .expect("queue arn");
    Queue { url, arn }
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tool venv's Python (`RESQ_PYTHON`, else the workspace's `.venv`).
pub fn tools_python() -> PathBuf {
    std::env::var_os("RESQ_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv/bin/python"))
}

/// `infra/template.yaml` translated to CloudFormation JSON by `infra/translate.py`, with
/// function code at `s3://{artifact_bucket}/{LogicalId}.zip`.
pub fn translated_template(artifact_bucket: &str) -> serde_json::Value {
    translated("infra/template.yaml", artifact_bucket)
}

/// A SAM template of the workspace (`infra/function.yaml`, …) translated as
/// [`translated_template`] translates resq's.
pub fn translated(template: &str, artifact_bucket: &str) -> serde_json::Value {
    let root = workspace_root();
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out = std::env::temp_dir().join(format!("resq-template-{}-{n}.json", std::process::id()));
    let status = Command::new(tools_python())
        .arg(root.join("infra/translate.py"))
        .arg(root.join(template))
        .arg(&out)
        .arg(artifact_bucket)
        .status()
        .expect("run infra/translate.py with the tool venv's python (make setup)");
    assert!(status.success(), "infra/translate.py failed on {template}");
    let text = std::fs::read_to_string(&out).expect("translated template");
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&text).expect("translated template is JSON")
}

/// [`translated_template`] written to `dir/template.json` (what `resq chaos` and `resq soak`
/// read); returns its path.
pub fn translated_template_file(dir: &std::path::Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("template directory");
    let path = dir.join("template.json");
    std::fs::write(&path, translated_template("resq-artifacts").to_string()).expect("template");
    path
}

/// A function binary of the workspace (`consumer`, `redriver`): `cargo test --workspace` builds
/// them next to the test binary's `deps` directory.
pub fn function_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} not built: run the tests with `make test` (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

/// The KMS actions `permissions` imply on the key of an SSE-KMS queue or bucket, once each, in
/// order (SQS developer guide, "Key management": a producer needs `kms:GenerateDataKey` and
/// `kms:Decrypt`, a consumer `kms:Decrypt`; S3 user guide: `PutObject` needs
/// `kms:GenerateDataKey`, `GetObject` `kms:Decrypt`; other calls need none): what the
/// template must grant on the stack's key beside a role's statements.
pub fn kms_actions(permissions: &[resq::iam::Permission]) -> Vec<&'static str> {
    let needs = |p: &resq::iam::Permission| -> &'static [&'static str] {
        match p.action {
            "sqs:SendMessage" => &["kms:GenerateDataKey", "kms:Decrypt"],
            "sqs:ReceiveMessage" | "s3:GetObject" => &["kms:Decrypt"],
            "s3:PutObject" => &["kms:GenerateDataKey"],
            _ => &[],
        }
    };
    let mut out: Vec<&str> = permissions
        .iter()
        .flat_map(|p| needs(p).iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::iam::Permission;

    #[test]
    fn senders_need_both_key_actions_readers_decrypt_writers_generate() {
        let send = Permission::new("sqs:SendMessage", "DeadLetterQueue");
        let receive = Permission::new("sqs:ReceiveMessage", "OrdersQueue");
        let put = Permission::new("s3:PutObject", "ArchiveBucket/archive/*");
        let alarm = Permission::new("cloudwatch:DescribeAlarms", "alarm:replays-failing");
        assert_eq!(kms_actions(&[receive]), ["kms:Decrypt"]);
        assert_eq!(kms_actions(&[put]), ["kms:GenerateDataKey"]);
        assert_eq!(
            kms_actions(&[receive, put, send, alarm]),
            ["kms:Decrypt", "kms:GenerateDataKey"]
        );
        assert!(kms_actions(&[alarm]).is_empty());
    }
}
