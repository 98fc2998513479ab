"""CSV and TSV files: their layout (delimiter, header, column names) sniffed from the
first lines, and their text read block by block with every row's line number."""

from tfinput._src.core.formats.csv import BLOCK_SIZE as BLOCK_SIZE
from tfinput._src.core.formats.csv import KNOWN_COLUMNS as KNOWN_COLUMNS
from tfinput._src.core.formats.csv import CsvReader as CsvReader
from tfinput._src.core.formats.csv import Layout as Layout
from tfinput._src.core.formats.csv import QuoteGuard as QuoteGuard
from tfinput._src.core.formats.csv import sniff_layout as sniff_layout
from tfinput._src.core.formats.csv import unclosed_quote as unclosed_quote
