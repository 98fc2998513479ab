"""The feature schema: what each column is and how it becomes a fixed-shape tensor."""

from tfinput._src.core.schema import MAX_INT32_VOCAB as MAX_INT32_VOCAB
from tfinput._src.core.schema import MAX_LEN as MAX_LEN
from tfinput._src.core.schema import Categorical as Categorical
from tfinput._src.core.schema import Dense as Dense
from tfinput._src.core.schema import Feature as Feature
from tfinput._src.core.schema import Label as Label
from tfinput._src.core.schema import MultiHot as MultiHot
from tfinput._src.core.schema import Schema as Schema
from tfinput._src.core.schema import Table as Table
