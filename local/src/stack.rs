//! The stack on the emulator: the translated template deployed into the emulator's
//! CloudFormation (on LocalStack without the Lambda resources it cannot run), its outputs, and
//! the template's own settings for what AWS runs around the functions (the event source
//! mapping's batch size, window and concurrency, the timeouts, the schedule, the functions'
//! environment), resolved the way CloudFormation resolves them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_cloudformation::types::{Capability, Parameter};
use serde_json::{Value, json};

use crate::CliError;
use crate::emulator::EmulatorKind;

/// Where the translated template expects the functions' code (placeholders in the emulator).
pub const ARTIFACT_BUCKET: &str = "resq-artifacts";

/// The stack outputs the pipeline needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackOutputs {
    /// The stack's name.
    pub stack_name: String,
    /// `OrdersQueueUrl`.
    pub main_queue_url: String,
    /// `OrdersQueueArn`.
    pub main_queue_arn: String,
    /// `DeadLetterQueueUrl`.
    pub dlq_url: String,
    /// `ArchiveBucketName`.
    pub bucket: String,
    /// `RedriverFailureQueueUrl` (the redriver's failed scheduled runs).
    pub failure_queue_url: String,
    /// `ConsumerFunctionName`.
    pub consumer_function: String,
    /// `RedriverFunctionName`.
    pub redriver_function: String,
}

impl StackOutputs {
    /// The operator tools' context for this stack.
    pub fn context(&self, config: &aws_config::SdkConfig) -> resq_ops::context::Context {
        resq_ops::context::Context::from_config(
            config,
            self.main_queue_url.clone(),
            self.dlq_url.clone(),
            self.bucket.clone(),
        )
    }
}

/// Whether CloudFormation refused a create because the stack exists.
fn already_exists(e: &CliError) -> bool {
    matches!(e, CliError::Aws { source, .. } if source.code.as_deref() == Some("AlreadyExistsException"))
}

/// Deploys the translated template (`infra/translate.py` output) into the emulator's
/// CloudFormation with `parameters`, and returns its outputs.
pub async fn deploy_stack(
    kind: EmulatorKind,
    config: &aws_config::SdkConfig,
    template_json: &str,
    stack_name: &str,
    parameters: &[(&str, &str)],
) -> Result<StackOutputs, CliError> {
    let template_body = match kind {
        EmulatorKind::Moto => {
            upload_placeholder_code(config).await?;
            template_json.to_owned()
        }
        EmulatorKind::Localstack => {
            let template: Value = serde_json::from_str(template_json).map_err(|e| {
                CliError::Usage(format!("the translated template is not JSON: {e}"))
            })?;
            without_functions(&template).to_string()
        }
    };
    let cfn = aws_sdk_cloudformation::Client::new(config);
    let params: Vec<Parameter> = parameters
        .iter()
        .map(|(k, v)| {
            Parameter::builder()
                .parameter_key(*k)
                .parameter_value(*v)
                .build()
        })
        .collect();
    // The token makes a retried create the same request: on a loaded machine the first attempt
    // can outlast its timeout and still take effect, and the retry would then be refused as a
    // stack that already exists. An emulator that ignores the token answers AlreadyExists:
    // the stack is then the one this create started (each run has an emulator of its own), and
    // is waited for below like any other.
    let token = format!(
        "resq-local-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    );
    // CloudFormation (and LocalStack's) takes at most 51,200 bytes inline; a larger template
    // goes by S3, as `sam deploy` sends it (moto takes any size inline, and reads no
    // path-style TemplateURL)
    let by_s3 = kind == EmulatorKind::Localstack && template_body.len() > MAX_TEMPLATE_BODY;
    let (template_body, template_url) = if by_s3 {
        (
            None,
            Some(upload_template(config, stack_name, template_body).await?),
        )
    } else {
        (Some(template_body), None)
    };
    let created = cfn
        .create_stack()
        .stack_name(stack_name)
        .set_template_body(template_body)
        .set_template_url(template_url)
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityNamedIam)
        .set_parameters(Some(params))
        .client_request_token(token)
        .send()
        .await
        .map_err(|e| CliError::aws(format!("creating stack {stack_name}"), e));
    match created {
        Ok(_) => {}
        Err(e) if already_exists(&e) => {
            tracing::warn!(
                stack = stack_name,
                "the create was answered AlreadyExists (a retried attempt); waiting for the stack it started"
            );
        }
        Err(e) => return Err(e),
    }
    // moto creates a stack before it answers; LocalStack in the background, as AWS does
    let started = Instant::now();
    let stack = loop {
        let stacks = cfn
            .describe_stacks()
            .stack_name(stack_name)
            .send()
            .await
            .map_err(|e| CliError::aws("describing the stack", e))?;
        let stack = stacks
            .stacks()
            .first()
            .cloned()
            .ok_or_else(|| CliError::Usage(format!("stack {stack_name} was not created")))?;
        let status = stack
            .stack_status()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default();
        if !status.ends_with("_IN_PROGRESS") || started.elapsed() > Duration::from_secs(180) {
            break stack;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = stack
        .stack_status()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    if status != "CREATE_COMPLETE" {
        let events = cfn
            .describe_stack_events()
            .stack_name(stack_name)
            .send()
            .await
            .ok()
            .map(|o| {
                o.stack_events()
                    .iter()
                    .filter(|e| e.resource_status_reason().is_some())
                    .map(|e| {
                        format!(
                            "  {}: {}",
                            e.logical_resource_id().unwrap_or_default(),
                            e.resource_status_reason().unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        return Err(CliError::Usage(format!(
            "stack {stack_name}: {status} {}\n{events}",
            stack.stack_status_reason().unwrap_or_default()
        )));
    }
    if kind == EmulatorKind::Moto {
        disable_emulator_mappings(config).await?;
    }
    let outputs: HashMap<&str, &str> = stack
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?, o.output_value()?)))
        .collect();
    let get = |k: &str| {
        outputs
            .get(k)
            .map(|v| (*v).to_owned())
            .ok_or_else(|| CliError::Usage(format!("stack output {k} missing")))
    };
    Ok(StackOutputs {
        stack_name: stack_name.to_owned(),
        main_queue_url: get("OrdersQueueUrl")?,
        main_queue_arn: get("OrdersQueueArn")?,
        dlq_url: get("DeadLetterQueueUrl")?,
        bucket: get("ArchiveBucketName")?,
        failure_queue_url: get("RedriverFailureQueueUrl")?,
        consumer_function: get("ConsumerFunctionName")?,
        redriver_function: get("RedriverFunctionName")?,
    })
}

/// The largest template CloudFormation takes inline (`TemplateBody`).
pub const MAX_TEMPLATE_BODY: usize = 51_200;

/// Puts a template in the emulator's artifact bucket; its URL, for `TemplateURL`.
async fn upload_template(
    config: &aws_config::SdkConfig,
    stack_name: &str,
    body: String,
) -> Result<String, CliError> {
    let s3 = resq::aws::s3_client(config);
    create_artifact_bucket(&s3).await?;
    let key = format!("templates/{stack_name}.json");
    s3.put_object()
        .bucket(ARTIFACT_BUCKET)
        .key(&key)
        .body(body.into_bytes().into())
        .send()
        .await
        .map_err(|e| CliError::aws("uploading the template", e))?;
    let endpoint = config.endpoint_url().ok_or_else(|| {
        CliError::Usage("deploying to an emulator needs its endpoint (AWS_ENDPOINT_URL)".into())
    })?;
    Ok(format!(
        "{}/{ARTIFACT_BUCKET}/{key}",
        endpoint.trim_end_matches('/')
    ))
}

/// The artifact bucket (a second stack on the same emulator finds it there).
async fn create_artifact_bucket(s3: &aws_sdk_s3::Client) -> Result<(), CliError> {
    match s3.create_bucket().bucket(ARTIFACT_BUCKET).send().await {
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_bucket_already_owned_by_you()) =>
        {
            Ok(())
        }
        other => other
            .map(|_| ())
            .map_err(|e| CliError::aws("creating the artifact bucket", e)),
    }
}

/// moto's CloudFormation creates the functions, so their code must exist: placeholders (the
/// pipeline runs the functions itself).
async fn upload_placeholder_code(config: &aws_config::SdkConfig) -> Result<(), CliError> {
    let s3 = resq::aws::s3_client(config);
    create_artifact_bucket(&s3).await?;
    for f in ["ConsumerFunction", "RedriverFunction"] {
        s3.put_object()
            .bucket(ARTIFACT_BUCKET)
            .key(format!("{f}.zip"))
            .body(b"placeholder".to_vec().into())
            .send()
            .await
            .map_err(|e| CliError::aws("uploading placeholder code", e))?;
    }
    Ok(())
}

/// The emulator would run the stack's event source mapping itself (invoking the function in
/// Docker, which is not here, and taking orders off the queue); disabled, the pipeline's
/// pollers take its place.
pub async fn disable_emulator_mappings(config: &aws_config::SdkConfig) -> Result<(), CliError> {
    let lambda = aws_sdk_lambda::Client::new(config);
    let mappings = lambda
        .list_event_source_mappings()
        .send()
        .await
        .map_err(|e| CliError::aws("listing event source mappings", e))?;
    for m in mappings.event_source_mappings() {
        if let Some(uuid) = m.uuid() {
            lambda
                .update_event_source_mapping()
                .uuid(uuid)
                .enabled(false)
                .send()
                .await
                .map_err(|e| CliError::aws("disabling the emulator's event source mapping", e))?;
        }
    }
    Ok(())
}

/// The template's metric alarm `id` as `PutMetricAlarm`, every property resolved by `r`
/// (alarm actions left out: no topic here). `Err` for a metric-math alarm or an unresolved
/// property.
pub fn alarm(
    template: &Value,
    id: &str,
    r: &Resolver<'_>,
) -> Result<
    aws_sdk_cloudwatch::operation::put_metric_alarm::builders::PutMetricAlarmInputBuilder,
    CliError,
> {
    use aws_sdk_cloudwatch::operation::put_metric_alarm::PutMetricAlarmInput;
    use aws_sdk_cloudwatch::types::{ComparisonOperator, Dimension, Statistic};
    let p = &template["Resources"][id]["Properties"];
    if p.get("MetricName").is_none() {
        return Err(CliError::Usage(format!(
            "the template has no metric alarm {id}"
        )));
    }
    let get = |k: &str| {
        r.value(&p[k])
            .ok_or_else(|| CliError::Usage(format!("{id}: {k} unresolved")))
    };
    let dimensions =
        p["Dimensions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                Ok(Dimension::builder()
                    .name(d["Name"].as_str().unwrap_or_default())
                    .value(r.value(&d["Value"]).ok_or_else(|| {
                        CliError::Usage(format!("{id}: a dimension is unresolved"))
                    })?)
                    .build())
            })
            .collect::<Result<Vec<_>, CliError>>()?;
    let mut alarm = PutMetricAlarmInput::builder()
        .alarm_name(get("AlarmName")?)
        .namespace(get("Namespace")?)
        .metric_name(get("MetricName")?)
        .set_dimensions(Some(dimensions))
        .statistic(Statistic::from(get("Statistic")?.as_str()))
        .period(r.number(&p["Period"], "Period")? as i32)
        .evaluation_periods(r.number(&p["EvaluationPeriods"], "EvaluationPeriods")? as i32)
        .threshold(r.number(&p["Threshold"], "Threshold")?)
        .comparison_operator(ComparisonOperator::from(
            get("ComparisonOperator")?.as_str(),
        ))
        .treat_missing_data(get("TreatMissingData")?);
    if p.get("DatapointsToAlarm").is_some() {
        alarm = alarm
            .datapoints_to_alarm(r.number(&p["DatapointsToAlarm"], "DatapointsToAlarm")? as i32);
    }
    Ok(alarm)
}

/// The variables the template gives the consumer for its telemetry (`POWERTOOLS_SERVICE_NAME`,
/// `POWERTOOLS_METRICS_NAMESPACE`: Globals, so the redriver's too), resolved by `r`: a function
/// run locally with them names its lines and metrics as the stack's would, so the template's
/// alarms read its metrics.
pub fn telemetry_env(
    template: &Value,
    r: &Resolver<'_>,
) -> Result<Vec<(String, String)>, CliError> {
    let vars = &template["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"];
    let out: Vec<(String, String)> = vars
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("POWERTOOLS_"))
        .map(|(k, v)| {
            r.value(v).map(|v| (k.clone(), v)).ok_or_else(|| {
                CliError::Usage(format!("the functions' variable {k} is unresolved"))
            })
        })
        .collect::<Result<_, _>>()?;
    if out.is_empty() {
        return Err(CliError::Usage(
            "the template gives the functions no POWERTOOLS_SERVICE_NAME or POWERTOOLS_METRICS_NAMESPACE".into(),
        ));
    }
    Ok(out)
}

/// moto's CloudFormation skips `AWS::CloudWatch::Alarm`: this puts the template's simple
/// metric alarms through the API instead (the two metric-math alarms are left out), so the
/// redriver finds the alarm it pauses on and `resq status` lists them. moto never evaluates an
/// alarm: they keep their first state. Returns how many were put.
pub async fn put_alarms(
    template: &Value,
    r: &Resolver<'_>,
    cloudwatch: &aws_sdk_cloudwatch::Client,
) -> Result<usize, CliError> {
    let mut put = 0;
    for (id, res) in template["Resources"].as_object().into_iter().flatten() {
        if res["Type"] != "AWS::CloudWatch::Alarm" || res["Properties"].get("MetricName").is_none()
        {
            continue;
        }
        // an alarm on what this stack does not have (the orders topic's DLQ without the topic)
        if let Some(c) = res["Condition"].as_str()
            && r.condition(c) == Some(false)
        {
            continue;
        }
        alarm(template, id, r)?
            .send_with(cloudwatch)
            .await
            .map_err(|e| CliError::aws(format!("putting alarm {id}"), e))?;
        put += 1;
    }
    Ok(put)
}

/// The template without what only Lambda can run (LocalStack needs Docker for a function):
/// every `AWS::Lambda::*` resource and each rule that targets a function go; what referred to a
/// function (alarm dimensions, the dashboard, outputs) gets the function's name instead, so the
/// alarms watch the metrics the local functions publish under that name.
pub fn without_functions(template: &Value) -> Value {
    let resources = template["Resources"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let names: HashMap<String, Value> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Lambda::Function")
        .map(|(id, r)| (id.clone(), r["Properties"]["FunctionName"].clone()))
        .collect();
    let removed: Vec<String> = resources
        .iter()
        .filter(|(_, r)| {
            let ty = r["Type"].as_str().unwrap_or_default();
            ty.starts_with("AWS::Lambda::")
                || (ty == "AWS::Events::Rule" && refers_to(&r["Properties"], &names))
        })
        .map(|(id, _)| id.clone())
        .collect();
    // what else of Lambda's went (the consumer's event source mapping) is referred to as
    // nothing: an empty mapping is no consumer breaker, as for a stack without one
    let mut names = names;
    for id in &removed {
        if !names.contains_key(id) && resources[id]["Type"] != "AWS::Events::Rule" {
            names.insert(id.clone(), json!(""));
        }
    }
    let mut out = template.clone();
    if let Some(rs) = out["Resources"].as_object_mut() {
        for id in &removed {
            rs.remove(id);
        }
        for r in rs.values_mut() {
            if let Some(deps) = r.get_mut("DependsOn") {
                match deps {
                    Value::Array(list) => list.retain(|d| !removed.iter().any(|id| d == id)),
                    Value::String(d) if removed.contains(d) => *deps = json!([]),
                    _ => {}
                }
            }
            replace_function_refs(r, &names);
        }
    }
    if let Some(outputs) = out.get_mut("Outputs") {
        replace_function_refs(outputs, &names);
    }
    out
}

fn refers_to(v: &Value, names: &HashMap<String, Value>) -> bool {
    match v {
        Value::Object(o) => {
            let by_ref = o
                .get("Ref")
                .and_then(Value::as_str)
                .is_some_and(|r| names.contains_key(r));
            let by_att = o
                .get("Fn::GetAtt")
                .and_then(|g| g.get(0))
                .and_then(Value::as_str)
                .is_some_and(|r| names.contains_key(r));
            by_ref || by_att || o.values().any(|x| refers_to(x, names))
        }
        Value::Array(a) => a.iter().any(|x| refers_to(x, names)),
        _ => false,
    }
}

fn replace_function_refs(v: &mut Value, names: &HashMap<String, Value>) {
    match v {
        Value::Object(o) => {
            if let Some(name) = o
                .get("Ref")
                .and_then(Value::as_str)
                .and_then(|r| names.get(r))
            {
                *v = name.clone();
                return;
            }
            let att = o.get("Fn::GetAtt").and_then(|g| {
                Some((
                    g.get(0)?.as_str()?.to_owned(),
                    g.get(1)?.as_str()?.to_owned(),
                ))
            });
            if let Some((id, attr)) = att
                && let Some(name) = names.get(&id)
            {
                *v = if attr == "Arn" {
                    json!({"Fn::Join": ["", ["arn:aws:lambda:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}, ":function:", name]]})
                } else {
                    name.clone()
                };
                return;
            }
            o.values_mut().for_each(|x| replace_function_refs(x, names));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| replace_function_refs(x, names)),
        _ => {}
    }
}

/// Resolves template values the way CloudFormation does, for one deployed stack: parameters
/// (the deployment's values, else the defaults), resources (by the names the stack got),
/// `Fn::Sub`, `Fn::FindInMap` and literals.
pub struct Resolver<'a> {
    template: &'a Value,
    stack_name: String,
    parameters: HashMap<String, String>,
    resources: HashMap<String, String>,
}

impl<'a> Resolver<'a> {
    /// For `template` deployed as `stack_name` with `parameters`.
    pub fn new(template: &'a Value, stack_name: &str, parameters: &[(&str, &str)]) -> Self {
        Self {
            template,
            stack_name: stack_name.to_owned(),
            parameters: parameters
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            resources: HashMap::new(),
        }
    }

    /// What `Ref` (or `Fn::GetAtt` as `Id.Attr`) of the resource `id` gives.
    pub fn with_resource(mut self, id: &str, value: &str) -> Self {
        self.resources.insert(id.to_owned(), value.to_owned());
        self
    }

    /// The resources of this stack, by their outputs.
    pub fn with_outputs(self, o: &StackOutputs) -> Self {
        let name = |url: &str| url.rsplit('/').next().unwrap_or_default().to_owned();
        self.with_resource("OrdersQueue", &o.main_queue_url)
            .with_resource("OrdersQueue.Arn", &o.main_queue_arn)
            .with_resource("OrdersQueue.QueueName", &name(&o.main_queue_url))
            .with_resource("DeadLetterQueue", &o.dlq_url)
            .with_resource("DeadLetterQueue.QueueName", &name(&o.dlq_url))
            .with_resource(
                "RedriverFailureQueue.QueueName",
                &name(&o.failure_queue_url),
            )
            .with_resource("ArchiveBucket", &o.bucket)
            .with_resource("RedriverFailureQueue", &o.failure_queue_url)
            .with_resource("ConsumerFunction", &o.consumer_function)
            .with_resource("RedriverFunction", &o.redriver_function)
    }

    fn reference(&self, name: &str) -> Option<String> {
        match name {
            "AWS::StackName" => return Some(self.stack_name.clone()),
            "AWS::Region" => return Some(crate::emulator::REGION.to_owned()),
            "AWS::AccountId" => return Some("000000000000".to_owned()),
            "AWS::Partition" => return Some("aws".to_owned()),
            _ => {}
        }
        if let Some(v) = self
            .parameters
            .get(name)
            .or_else(|| self.resources.get(name))
        {
            return Some(v.clone());
        }
        scalar(&self.template["Parameters"][name]["Default"])
    }

    /// Whether the template's condition `name` holds for this stack (`None`: undecidable).
    pub fn condition(&self, name: &str) -> Option<bool> {
        self.holds(&self.template["Conditions"][name])
    }

    fn holds(&self, c: &Value) -> Option<bool> {
        if let Some(name) = c.get("Condition").and_then(Value::as_str) {
            return self.condition(name);
        }
        let args = |f: &str| c.get(f).and_then(Value::as_array);
        if let Some(a) = args("Fn::Equals") {
            return Some(self.value(a.first()?)? == self.value(a.get(1)?)?);
        }
        if let Some(a) = args("Fn::Not") {
            return Some(!self.holds(a.first()?)?);
        }
        let all = |a: &Vec<Value>| a.iter().map(|x| self.holds(x)).collect::<Option<Vec<_>>>();
        if let Some(a) = args("Fn::And") {
            return Some(all(a)?.into_iter().all(|b| b));
        }
        if let Some(a) = args("Fn::Or") {
            return Some(all(a)?.into_iter().any(|b| b));
        }
        None
    }

    /// `v` as this stack gets it: its `Fn::If`s decided ([`Self::taken`]), `None` when that
    /// leaves `AWS::NoValue` (the property or list item is left out).
    pub fn decided<'v>(&self, v: &'v Value) -> Option<&'v Value> {
        let v = self.taken(v);
        (v.get("Ref").and_then(Value::as_str) != Some("AWS::NoValue")).then_some(v)
    }

    /// `v` with its `Fn::If`s decided for this stack: the branch taken (`v` itself when it is
    /// no `Fn::If` or its condition is undecidable).
    fn taken<'v>(&self, v: &'v Value) -> &'v Value {
        let Some([cond, yes, no]) = v.get("Fn::If").and_then(Value::as_array).map(Vec::as_slice)
        else {
            return v;
        };
        match cond.as_str().and_then(|c| self.condition(c)) {
            Some(true) => self.taken(yes),
            Some(false) => self.taken(no),
            None => v,
        }
    }

    /// The value of `v`; `None` when it refers to something this stack cannot resolve.
    pub fn value(&self, v: &Value) -> Option<String> {
        if v.get("Fn::If").is_some() {
            let branch = self.taken(v);
            return if std::ptr::eq(branch, v) {
                None
            } else {
                self.value(branch)
            };
        }
        if let Some(r) = v.get("Ref").and_then(Value::as_str) {
            return self.reference(r);
        }
        if let Some(g) = v.get("Fn::GetAtt") {
            let id = g.get(0)?.as_str()?;
            let attr = g.get(1)?.as_str()?;
            return self.resources.get(&format!("{id}.{attr}")).cloned();
        }
        if let Some(s) = v.get("Fn::Sub") {
            let (text, vars) = match s {
                Value::String(t) => (t.as_str(), None),
                Value::Array(a) => (a.first()?.as_str()?, a.get(1)),
                _ => return None,
            };
            let mut out = String::new();
            let mut rest = text;
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let end = rest[start..].find('}')? + start;
                let name = &rest[start + 2..end];
                let value = match vars.and_then(|m| m.get(name)) {
                    Some(x) => self.value(x)?,
                    None => self.reference(name)?,
                };
                out.push_str(&value);
                rest = &rest[end + 1..];
            }
            out.push_str(rest);
            return Some(out);
        }
        if let Some([sep, items]) = v
            .get("Fn::Join")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            let sep = sep.as_str()?;
            // a list, or a list parameter (CommaDelimitedList: its value as given, "a,b")
            return match items {
                Value::Array(a) => a
                    .iter()
                    .map(|x| self.value(x))
                    .collect::<Option<Vec<_>>>()
                    .map(|parts| parts.join(sep)),
                _ => Some(self.value(items)?.split(',').collect::<Vec<_>>().join(sep)),
            };
        }
        if let Some(m) = v.get("Fn::FindInMap").and_then(Value::as_array) {
            let map = self.value(m.first()?)?;
            let k1 = self.value(m.get(1)?)?;
            let k2 = self.value(m.get(2)?)?;
            return scalar(&self.template["Mappings"][map][k1][k2]);
        }
        scalar(v)
    }

    /// The value of `v` as a number, `default` when the template leaves it out (absent, or
    /// `AWS::NoValue` for this stack; a value that is there but does not resolve is an error,
    /// not the default).
    pub fn number_or(&self, v: &Value, what: &str, default: f64) -> Result<f64, CliError> {
        let v = self.taken(v);
        if v.is_null() || v.get("Ref").and_then(Value::as_str) == Some("AWS::NoValue") {
            Ok(default)
        } else {
            self.number(v, what)
        }
    }

    /// The value of `v` as a number.
    pub fn number(&self, v: &Value, what: &str) -> Result<f64, CliError> {
        self.value(v)
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| CliError::Usage(format!("the template's {what} is not a number")))
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// What AWS runs around the functions, as the template sets it.
#[derive(Debug, Clone, PartialEq)]
pub struct AroundFunctions {
    /// The event source mapping's `BatchSize`.
    pub batch_size: i32,
    /// Its `MaximumBatchingWindowInSeconds`.
    pub batching_window: Duration,
    /// Its `ScalingConfig.MaximumConcurrency`.
    pub max_concurrency: usize,
    /// The consumer's timeout.
    pub consumer_timeout: Duration,
    /// The redriver's timeout.
    pub redriver_timeout: Duration,
    /// The redriver's schedule period (`rate(N minutes)`).
    pub schedule: Duration,
    /// Each function's environment (`Environment.Variables`, resolved), consumer first.
    pub consumer_env: Vec<(String, String)>,
    /// The redriver's.
    pub redriver_env: Vec<(String, String)>,
    /// Each function's application log level (`LoggingConfig.ApplicationLogLevel`).
    pub log_level: String,
}

/// Reads [`AroundFunctions`] from the translated template, for the stack `r` resolves.
pub fn around_functions(template: &Value, r: &Resolver<'_>) -> Result<AroundFunctions, CliError> {
    let res = &template["Resources"];
    let mapping = &res["ConsumerFunctionOrders"]["Properties"];
    let consumer = &res["ConsumerFunction"]["Properties"];
    let redriver = &res["RedriverFunction"]["Properties"];
    if !mapping.is_object() || !consumer.is_object() || !redriver.is_object() {
        return Err(CliError::Usage(
            "the template lacks the consumer, its event source mapping or the redriver".into(),
        ));
    }
    let schedule = r
        .value(&res["RedriverFunctionSchedule"]["Properties"]["ScheduleExpression"])
        .ok_or_else(|| CliError::Usage("the redriver's schedule is unresolved".into()))?;
    let env = |p: &Value| -> Result<Vec<(String, String)>, CliError> {
        p["Environment"]["Variables"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                // the local poller honours no event source mapping (nor does the stack's one
                // resolve here): no consumer breaker in the local pipeline
                if k == "CONSUMER_EVENT_SOURCE_MAPPING" {
                    return Ok((k.clone(), String::new()));
                }
                r.value(v).map(|v| (k.clone(), v)).ok_or_else(|| {
                    CliError::Usage(format!("the functions' variable {k} is unresolved"))
                })
            })
            .collect()
    };
    Ok(AroundFunctions {
        batch_size: r.number(&mapping["BatchSize"], "BatchSize")? as i32,
        batching_window: Duration::from_secs_f64(r.number_or(
            &mapping["MaximumBatchingWindowInSeconds"],
            "MaximumBatchingWindowInSeconds",
            0.0,
        )?),
        // Lambda's default without a ScalingConfig is up to 1,000 at once: locally, 10
        max_concurrency: r.number_or(
            &mapping["ScalingConfig"]["MaximumConcurrency"],
            "MaximumConcurrency",
            10.0,
        )? as usize,
        consumer_timeout: Duration::from_secs_f64(
            r.number(&consumer["Timeout"], "consumer Timeout")?,
        ),
        redriver_timeout: Duration::from_secs_f64(
            r.number(&redriver["Timeout"], "redriver Timeout")?,
        ),
        schedule: rate(&schedule)?,
        consumer_env: env(consumer)?,
        redriver_env: env(redriver)?,
        log_level: match &consumer["LoggingConfig"]["ApplicationLogLevel"] {
            Value::Null => "INFO".into(),
            v => r.value(v).ok_or_else(|| {
                CliError::Usage("the consumer's ApplicationLogLevel is unresolved".into())
            })?,
        },
    })
}

/// `rate(1 minute)`, `rate(5 minutes)`, `rate(2 hours)` as a period.
pub fn rate(expression: &str) -> Result<Duration, CliError> {
    let bad = || CliError::Usage(format!("\"{expression}\" is not a rate(...) schedule"));
    let inner = expression
        .trim()
        .strip_prefix("rate(")
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(bad)?;
    let mut parts = inner.split_whitespace();
    let n: u64 = parts.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
    let unit = match parts.next().ok_or_else(bad)?.trim_end_matches('s') {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(n * unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_existing_stack_lets_a_create_go_on_to_wait() {
        let refused = |code: Option<&str>| CliError::Aws {
            what: "creating stack resq-live".into(),
            source: resq::error::AwsError {
                code: code.map(str::to_owned),
                message: "service error".into(),
                kind: resq::error::AwsErrorKind::default(),
            },
        };
        assert!(already_exists(&refused(Some("AlreadyExistsException"))));
        assert!(!already_exists(&refused(Some("ValidationError"))));
        assert!(!already_exists(&refused(None)));
        assert!(!already_exists(&CliError::Usage("x".into())));
    }

    fn template() -> Value {
        json!({
            "Parameters": {"Rate": {"Type": "String", "Default": "rate(5 minutes)"}, "T": {"Type": "String", "Default": "30"}},
            "Mappings": {"Timeouts": {"30": {"Timeout": 33}}},
            "Resources": {
                "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"FunctionName": {"Fn::Sub": "${AWS::StackName}-fn"}}},
                "Map": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {"FunctionName": {"Ref": "Fn"}}},
                "Rule": {"Type": "AWS::Events::Rule", "Properties": {"Targets": [{"Arn": {"Fn::GetAtt": ["Fn", "Arn"]}}]}},
                "Other": {"Type": "AWS::Events::Rule", "Properties": {"Targets": [{"Arn": "arn:x"}]}},
                "Alarm": {"Type": "AWS::CloudWatch::Alarm", "DependsOn": ["Fn", "Q"], "Properties": {"Dimensions": [{"Name": "FunctionName", "Value": {"Ref": "Fn"}}]}},
                "Q": {"Type": "AWS::SQS::Queue"}
            },
            "Outputs": {"FnName": {"Value": {"Ref": "Fn"}}, "FnArn": {"Value": {"Fn::GetAtt": ["Fn", "Arn"]}}}
        })
    }

    #[test]
    fn without_functions_drops_lambda_and_its_rules_and_names_the_function_instead() {
        let t = without_functions(&template());
        let mut ids: Vec<&String> = t["Resources"].as_object().unwrap().keys().collect();
        ids.sort();
        assert_eq!(ids, ["Alarm", "Other", "Q"]);
        let alarm = &t["Resources"]["Alarm"];
        assert_eq!(alarm["DependsOn"], json!(["Q"]));
        assert_eq!(
            alarm["Properties"]["Dimensions"][0]["Value"],
            json!({"Fn::Sub": "${AWS::StackName}-fn"})
        );
        assert_eq!(
            t["Outputs"]["FnName"]["Value"],
            json!({"Fn::Sub": "${AWS::StackName}-fn"})
        );
        assert_eq!(
            t["Outputs"]["FnArn"]["Value"]["Fn::Join"][1][4],
            json!(":function:")
        );
    }

    #[test]
    fn resolver_follows_parameters_resources_sub_and_mappings() {
        let t = template();
        let r = Resolver::new(&t, "stk", &[("T", "30")]).with_resource("Q", "http://q");
        assert_eq!(
            r.value(&json!({"Ref": "Rate"})).as_deref(),
            Some("rate(5 minutes)")
        );
        assert_eq!(r.value(&json!({"Ref": "Q"})).as_deref(), Some("http://q"));
        assert_eq!(
            r.value(&json!({"Fn::Sub": "${AWS::StackName}-x-${Q}"}))
                .as_deref(),
            Some("stk-x-http://q")
        );
        assert_eq!(
            r.value(&json!({"Fn::Sub": ["${A}!", {"A": {"Ref": "T"}}]}))
                .as_deref(),
            Some("30!")
        );
        assert_eq!(
            r.value(&json!({"Fn::FindInMap": ["Timeouts", {"Ref": "T"}, "Timeout"]}))
                .as_deref(),
            Some("33")
        );
        assert_eq!(r.value(&json!({"Ref": "Nope"})), None);
        assert_eq!(
            r.value(&json!({"Fn::Join": ["-", [{"Ref": "T"}, "x"]]}))
                .as_deref(),
            Some("30-x")
        );
        let list = Resolver::new(&t, "stk", &[("L", "a,b")]);
        assert_eq!(
            list.value(&json!({"Fn::Join": ["", {"Ref": "L"}]}))
                .as_deref(),
            Some("ab")
        );
        assert_eq!(r.number_or(&Value::Null, "absent", 3.0).unwrap(), 3.0);
        assert_eq!(r.number_or(&json!({"Ref": "T"}), "T", 3.0).unwrap(), 30.0);
        assert!(
            r.number_or(&json!({"Ref": "Nope"}), "unresolved", 3.0)
                .is_err()
        );
    }

    #[test]
    fn resolver_decides_conditions_and_leaves_out_no_value() {
        let t = json!({
            "Parameters": {"Kind": {"Type": "String", "Default": "standard"}, "W": {"Type": "Number", "Default": 1}},
            "Conditions": {"IsFifo": {"Fn::Equals": [{"Ref": "Kind"}, "fifo"]}, "NotFifo": {"Fn::Not": [{"Condition": "IsFifo"}]}},
        });
        let window = json!({"Fn::If": ["IsFifo", {"Ref": "AWS::NoValue"}, {"Ref": "W"}]});
        let name = json!({"Fn::If": ["NotFifo", {"Fn::Sub": "${AWS::StackName}-q"}, {"Fn::Sub": "${AWS::StackName}-q.fifo"}]});
        let standard = Resolver::new(&t, "stk", &[]);
        assert_eq!(standard.condition("IsFifo"), Some(false));
        assert_eq!(standard.number_or(&window, "window", 0.0).unwrap(), 1.0);
        assert_eq!(standard.value(&name).as_deref(), Some("stk-q"));
        let fifo = Resolver::new(&t, "stk", &[("Kind", "fifo")]);
        assert_eq!(fifo.condition("NotFifo"), Some(false));
        assert_eq!(fifo.number_or(&window, "window", 0.0).unwrap(), 0.0);
        assert_eq!(fifo.value(&window), None);
        assert_eq!(fifo.decided(&window), None);
        assert_eq!(standard.decided(&window), Some(&json!({"Ref": "W"})));
        assert_eq!(fifo.value(&name).as_deref(), Some("stk-q.fifo"));
        assert_eq!(fifo.condition("Nope"), None);
        assert!(
            fifo.number_or(&json!({"Fn::If": ["Nope", 1, 2]}), "undecidable", 0.0)
                .is_err()
        );
    }

    #[test]
    fn rates_parse_and_others_are_refused() {
        assert_eq!(rate("rate(1 minute)").unwrap(), Duration::from_secs(60));
        assert_eq!(rate("rate(5 minutes)").unwrap(), Duration::from_secs(300));
        assert_eq!(rate("rate(2 hours)").unwrap(), Duration::from_secs(7200));
        assert!(rate("cron(0 * * * ? *)").is_err());
        assert!(rate("rate(five minutes)").is_err());
    }
}
