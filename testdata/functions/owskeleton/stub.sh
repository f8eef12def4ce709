#!/bin/sh
# The action when /init brings no code, as in OpenWhisk's Docker skeleton.
echo "This is a stub action. Replace it with custom logic."
echo '{ "error": "This is a stub action. Replace it with custom logic." }'
