"""Parameter types that several features' routes share (their OpenAPI comes from these)."""

from __future__ import annotations

from typing import Annotated

from litestar.params import PathParameter, QueryParameter

from ..events.model import PROJECT_PATTERN

# `?project=`: the project a request reads or writes.
ProjectParam = Annotated[str, QueryParameter(pattern=PROJECT_PATTERN, description="project name")]
# `/{project}` in a path.
PathProject = Annotated[str, PathParameter(pattern=PROJECT_PATTERN)]
