"""Deterministic synthetic data sets on disk: ``tfinput datagen``."""

from tfinput._src.applications.datagen import PRESETS as PRESETS
from tfinput._src.applications.datagen import DatagenResult as DatagenResult
from tfinput._src.applications.datagen import generate_files as generate_files
from tfinput._src.applications.datagen import preset_schema as preset_schema
