# make_archive USER_FOLDER REPO USER: snapshots every *.sqlite of USER_FOLDER with sqlite3's
# .backup and writes <REPO>/<USER>/<stamp>.tar.zst in granary's archive format (MANIFEST.json
# first, then stores/), printing its path. Used by bench/restore.sh and scripts/demo-restore.sh
# so that they work with or without `granary backup`.
# An archive in granary's format without `granary backup` (MANIFEST.json first, stores/ after).
make_archive() { # user-folder repo user
    local folder=$1 repo=$2 user=$3 snap; snap=$(mktemp -d)
    mkdir -p "$snap/stores" "$repo/$user"
    local stores="" files="" sep=""
    for db in "$folder"/*.sqlite; do
        local name; name=$(basename "$db")
        sqlite3 "$db" ".backup '$snap/stores/$name'"
        local size sha ps pc
        size=$(stat -c %s "$snap/stores/$name"); sha=$(sha256sum "$snap/stores/$name" | cut -d' ' -f1)
        ps=$(sqlite3 "$snap/stores/$name" "pragma page_size"); pc=$(sqlite3 "$snap/stores/$name" "pragma page_count")
        stores+="$sep{\"name\":\"$name\",\"path\":\"stores/$name\",\"pageSize\":$ps,\"pageCount\":$pc,\"journalMode\":\"wal\",\"sqliteVersion\":\"$(sqlite3 --version | cut -d' ' -f1)\",\"check\":\"quick\",\"integrity\":\"ok\"}"
        files+="$sep{\"path\":\"stores/$name\",\"size\":$size,\"sha256\":\"$sha\",\"kind\":\"store\"}"
        sep=","
    done
    local stamp; stamp=$(date -u +%Y%m%dT%H%M%SZ)
    printf '{"format":1,"tool":"granary","toolVersion":"bench","user":"%s","host":"%s","created":"%s","compression":"zstd","stores":[%s],"files":[%s]}\n' \
        "$user" "$(hostname)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$stores" "$files" > "$snap/MANIFEST.json"
    tar -C "$snap" --zstd -cf "$repo/$user/$stamp.tar.zst" MANIFEST.json stores
    rm -rf "$snap"
    echo "$repo/$user/$stamp.tar.zst"
}

