"""Quote streams: the format, the reader and writer, the recorder, importers and the prefetching
reader."""
