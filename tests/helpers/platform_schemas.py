"""The results.json each grading platform documents, as JSON Schemas (what the tests hold ours to).

Gradescope: https://gradescope-autograders.readthedocs.io/en/latest/specs/ ("Output format"): the
top level's score overrides the tests' total; each test's score, max_score, status ("passed" or
"failed"), name, output, output_format and visibility ("hidden", "after_due_date",
"after_published", "visible"). PrairieLearn: https://prairielearn.readthedocs.io/en/latest/
externalGrading/ ("Grading results"): gradable (default true), score in [0, 1] when gradable,
message, output, tests with name, description, points, max_points, message, output; a file past
1 MB fails the job.
"""

VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
FORMAT = {"enum": ["text", "html", "simple_format", "md", "ansi"]}

GRADESCOPE = {
    "type": "object",
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number"},
        "output": {"type": "string"},
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "score": {"type": "number"},
                    "max_score": {"type": "number", "minimum": 0},
                    "status": {"enum": ["passed", "failed"]},
                    "name": {"type": "string"},
                    "name_format": FORMAT,
                    "number": {"type": "string"},
                    "output": {"type": "string"},
                    "output_format": FORMAT,
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "visibility": VISIBILITY,
                    "extra_data": {"type": "object"},
                },
                "additionalProperties": False,
            },
        },
        "leaderboard": {"type": "array"},
    },
    "additionalProperties": False,
    "anyOf": [{"required": ["score"]}, {"required": ["tests"]}],
}

PRAIRIELEARN_TEST = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "points": {"type": "number"},
        "max_points": {"type": "number", "minimum": 0},
        "message": {"type": "string"},
        "output": {"type": "string"},
        "images": {"type": "array"},
    },
    "required": ["name"],
    "additionalProperties": False,
}

PRAIRIELEARN = {
    "type": "object",
    "properties": {
        "gradable": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": "string"},
        "output": {"type": "string"},
        "format_errors": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "images": {"type": "array"},
        "tests": {"type": "array", "items": PRAIRIELEARN_TEST},
    },
    "additionalProperties": False,
    "if": {"properties": {"gradable": {"const": False}}, "required": ["gradable"]},
    "then": {},
    "else": {"required": ["score"]},
}

MAX_PRAIRIELEARN_BYTES = 2**20
