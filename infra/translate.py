#!/usr/bin/env python3
"""Translate the SAM template to plain CloudFormation JSON, offline.

cfn-lint no longer expands the SAM transform, so mistakes inside a function's `Events` would go
unnoticed; linting the translation catches them. The template tests also deploy this output
into a local emulator. A local `CodeUri` becomes `s3://<bucket>/<LogicalId>.zip` (the tests upload
placeholders there); one already in S3 (infra/function.yaml's `Bucket`/`Key` parameters) stays;
managed policies are never looked up (the templates name none).

usage: translate.py TEMPLATE OUTPUT [ARTIFACT_BUCKET]
"""
import json
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samtranslator.translator.managed_policy_translator import ManagedPolicyLoader  # noqa: E402
from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402


class OfflinePolicies(ManagedPolicyLoader):
    """No IAM calls: the template writes its policies out."""

    def __init__(self):
        pass

    def load(self):
        return {}


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    source, output = argv[1], argv[2]
    bucket = argv[3] if len(argv) == 4 else "resq-artifacts"
    with open(source, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::Serverless::Function":
            properties = resource.setdefault("Properties", {})
            if not isinstance(properties.get("CodeUri"), dict):
                properties["CodeUri"] = f"s3://{bucket}/{name}.zip"
    translated = transform(template, {}, OfflinePolicies())
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as f:
        json.dump(translated, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
