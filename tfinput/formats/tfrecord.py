"""TFRecord files of ``tf.train.Example``: names, compression, reading and writing."""

from tfinput._src.core.formats.tfrecord import COMPRESSIONS as COMPRESSIONS
from tfinput._src.core.formats.tfrecord import WireColumn as WireColumn
from tfinput._src.core.formats.tfrecord import bytes_column as bytes_column
from tfinput._src.core.formats.tfrecord import check_compression as check_compression
from tfinput._src.core.formats.tfrecord import compression_from_name as compression_from_name
from tfinput._src.core.formats.tfrecord import compression_of as compression_of
from tfinput._src.core.formats.tfrecord import count_readable as count_readable
from tfinput._src.core.formats.tfrecord import count_records as count_records
from tfinput._src.core.formats.tfrecord import encode_examples as encode_examples
from tfinput._src.core.formats.tfrecord import is_tfrecord_name as is_tfrecord_name
from tfinput._src.core.formats.tfrecord import parse_example as parse_example
from tfinput._src.core.formats.tfrecord import records as records
from tfinput._src.core.formats.tfrecord import write_records as write_records
from tfinput._src.core.formats.tfrecord import writer as writer
