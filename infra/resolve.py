#!/usr/bin/env python3
"""The translated template as one deployment sees it: its conditions decided for parameters.

checkov does not decide `Fn::If`: a property chosen by a condition (the bucket's encryption,
a role's key statement) reads as unknown to it, and its IAM checks skip a role whose policy has
one. `make lint` therefore scans each `Encryption` value's resolution: conditions evaluated
with the given parameters (the rest at their defaults), each `Fn::If` replaced by the branch
taken, `AWS::NoValue` left out, resources and outputs whose condition is false removed (the others lose their `Condition`:
checkov would not scan them).
Everything else (intrinsic functions, checkov skips in `Metadata`) is kept as it is.

usage: resolve.py TEMPLATE_JSON OUTPUT [NAME=VALUE ...]
"""
import json
import sys

NO_VALUE = object()


class Resolver:
    def __init__(self, template, parameters):
        self.template = template
        self.parameters = {
            name: str(p.get("Default", "")) for name, p in template.get("Parameters", {}).items()
        }
        for name, value in parameters.items():
            if name not in self.parameters:
                sys.exit(f"resolve.py: the template has no parameter {name}")
            allowed = template["Parameters"][name].get("AllowedValues")
            if allowed is not None and value not in map(str, allowed):
                sys.exit(f"resolve.py: {name} must be one of {allowed}, not {value!r}")
            self.parameters[name] = value

    def scalar(self, v):
        if isinstance(v, dict) and set(v) == {"Ref"} and v["Ref"] in self.parameters:
            return self.parameters[v["Ref"]]
        # a list parameter (CommaDelimitedList) joined
        if isinstance(v, dict) and set(v) == {"Fn::Join"}:
            sep, items = v["Fn::Join"]
            if isinstance(items, dict) and set(items) == {"Ref"} and items["Ref"] in self.parameters:
                return sep.join(self.parameters[items["Ref"]].split(","))
        if isinstance(v, (str, int, float, bool)):
            return str(v).lower() if isinstance(v, bool) else str(v)
        sys.exit(f"resolve.py: a condition compares what only a deployment knows: {v}")

    def holds(self, c):
        if "Condition" in c:
            return self.condition(c["Condition"])
        if "Fn::Equals" in c:
            a, b = c["Fn::Equals"]
            return self.scalar(a) == self.scalar(b)
        if "Fn::Not" in c:
            return not self.holds(c["Fn::Not"][0])
        if "Fn::And" in c:
            return all(self.holds(x) for x in c["Fn::And"])
        if "Fn::Or" in c:
            return any(self.holds(x) for x in c["Fn::Or"])
        sys.exit(f"resolve.py: not a condition: {c}")

    def condition(self, name):
        return self.holds(self.template["Conditions"][name])

    def value(self, v):
        if isinstance(v, dict):
            if set(v) == {"Fn::If"}:
                name, yes, no = v["Fn::If"]
                return self.value(yes if self.condition(name) else no)
            if v == {"Ref": "AWS::NoValue"}:
                return NO_VALUE
            out = {}
            for k, x in v.items():
                x = self.value(x)
                if x is not NO_VALUE:
                    out[k] = x
            return out
        if isinstance(v, list):
            return [x for x in map(self.value, v) if x is not NO_VALUE]
        return v


def resolve(template, parameters):
    r = Resolver(template, parameters)
    out = dict(template)
    for section in ("Resources", "Outputs"):
        out[section] = {
            name: r.value({k: v for k, v in item.items() if k != "Condition"})
            for name, item in template.get(section, {}).items()
            if "Condition" not in item or r.condition(item["Condition"])
        }
    return out


def main(argv):
    if len(argv) < 3 or not all("=" in a for a in argv[3:]):
        sys.exit(__doc__)
    with open(argv[1], encoding="utf-8") as f:
        template = json.load(f)
    parameters = dict(a.split("=", 1) for a in argv[3:])
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump(resolve(template, parameters), f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
