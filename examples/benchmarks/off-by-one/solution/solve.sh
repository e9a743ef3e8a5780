#!/bin/bash
# Deliberately wrong: `wc -l FILE` also prints the file's name.
printf '#!/bin/bash\nwc -l "$1"\n' > /app/count.sh
chmod +x /app/count.sh
