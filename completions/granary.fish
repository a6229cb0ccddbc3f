function __granary_should_offer_completions_for_flags_or_options -a expected_commands
    set -l non_repeating_flags_or_options $argv[2..]
    set -l non_repeating_flags_or_options_absent 0
    set -l positional_index 0
    set -l commands
    __granary_parse_tokens
    test "$commands" = "$expected_commands"; and return $non_repeating_flags_or_options_absent
end

function __granary_should_offer_completions_for_positional -a expected_commands positional_index_comparison expected_positional_index
    set -l non_repeating_flags_or_options
    set -l non_repeating_flags_or_options_absent 0
    set -l positional_index 0
    set -l commands
    __granary_parse_tokens
    test "$commands" = "$expected_commands" -a \( "$positional_index" "$positional_index_comparison" "$expected_positional_index" \)
end

function __granary_parse_tokens -S
    set -l unparsed_tokens (__granary_tokens -pc)
    switch $unparsed_tokens[1]
    case 'granary'
        __granary_parse_subcommand 0 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'version' 'h/help'
        switch $unparsed_tokens[1]
        case 'init'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'version' 'h/help'
        case 'users'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'version' 'h/help'
        case 'backup'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'all' 'compression=' 'level=' 'check=' 'label=' 'jobs=' 'lock-timeout=' 'prune' 'delta' 'full' 'no-delta' 'mirror=+' 'exclude=+' 'version' 'h/help'
        case 'list'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'all-hosts' 'version' 'h/help'
        case 'verify'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'user=' 'all' 'latest' 'check=' 'force' 'chain' 'version' 'h/help'
        case 'inspect'
            __granary_parse_subcommand 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'version' 'h/help'
        case 'check'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'mirror=+' 'max-age=' 'exclude=+' 'max-follow-lag=' 'nagios' 'textfile=' 'version' 'h/help'
        case 'delete'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'user=' 'force' 'dry-run' 'lock-timeout=' 'version' 'h/help'
        case 'prune'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'all' 'keep-last=' 'keep-hourly=' 'keep-daily=' 'keep-weekly=' 'keep-monthly=' 'keep-yearly=' 'keep-within=' 'final-keep-within=' 'followed-keep-within=' 'lock-timeout=' 'dry-run' 'no-merge' 'version' 'h/help'
        case 'restore'
            __granary_parse_subcommand 2 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'at=' 'to=' 'method=' 'dry-run' 'undo' 'owner-timeout=' 'lock-timeout=' 'force' 'no-safety-archive' 'create' 'owner=' 'mode=' 'version' 'h/help'
        case 'reset'
            __granary_parse_subcommand 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'method=' 'dry-run' 'owner-timeout=' 'lock-timeout=' 'no-safety-archive' 'y/yes' 'version' 'h/help'
        case 'retire'
            __granary_parse_subcommand 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'y/yes' 'discard-others' 'owner-timeout=' 'lock-timeout=' 'version' 'h/help'
        case 'recover'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'lock-timeout=' 'version' 'h/help'
        case 'sync'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'mirror=+' 'dry-run' 'lock-timeout=' 'version' 'h/help'
        case 'follow'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'interval=' 'once' 'textfile=' 'version' 'h/help'
        case 'adopt'
            __granary_parse_subcommand -r 1 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'dry-run' 'lock-timeout=' 'version' 'h/help'
        case 'config'
            __granary_parse_subcommand 0 'root=' 'repo=' 'host=' 'config=' 'json' 'q/quiet' 'v/verbose' 'systemd' 'version' 'h/help'
        case 'help'
            __granary_parse_subcommand -r 1 'version'
        end
    end
end

function __granary_tokens
    if test (string split -m 1 -f 1 -- . "$FISH_VERSION") -gt 3
        commandline --tokens-raw $argv
    else
        commandline -o $argv
    end
end

function __granary_parse_subcommand -S -a positional_count
    argparse -s r -- $argv
    set -l option_specs $argv[2..]
    set -l is_repeating_positional $_flag_r
    set -el _flag_r
    set -a commands $unparsed_tokens[1]
    set positional_index 0
    while true
        set -e unparsed_tokens[1]
        argparse -sn "$commands" $option_specs -- $unparsed_tokens 2> /dev/null
        set unparsed_tokens $argv
        set positional_index (math $positional_index + 1)
        for non_repeating_flag_or_option in $non_repeating_flags_or_options
            if set -ql "_flag_$(string replace -a - _ -- $non_repeating_flag_or_option)"
                set non_repeating_flags_or_options_absent 1
                break
            end
        end
        test (count $unparsed_tokens) -eq 0 -o \( -z "$is_repeating_positional" -a "$positional_index" -gt "$positional_count" \) && break
    end
end

function __granary_complete_directories
    set -l token (commandline -t)
    string match -- '*/' $token
    set -l subdirs $token*/
    printf %s\n $subdirs
end

function __granary_custom_completion
    set -x SAP_SHELL fish
    set -x SAP_SHELL_VERSION $FISH_VERSION
    set -l tokens (__granary_tokens -p)
    if test -z "$(__granary_tokens -t)"
        set -l index (count (__granary_tokens -pc))
        set tokens $tokens[..$index] \'\' $tokens[(math $index + 1)..]
    end
    command $tokens[1] $argv $tokens
end

complete -c 'granary' -f
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'init' -d 'Make a repository or a mirror: the one command that creates one.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'users' -d 'List the users under the root: stores, sizes, last backup and its age.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'backup' -d 'Snapshot each user\'s stores into one new archive per user.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'list' -d 'List archives, newest first: time, age, size, compression, stores, label, verified state.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'verify' -d 'Re-read archives: every member against the manifest, then SQLite\'s integrity check.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'inspect' -d 'Describe a store or an archive: page size, journal mode, tables, row counts, Core Data metadata.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'check' -d 'For monitoring: exit 1 unless every user has a checked archive younger than --max-age.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'delete' -d 'Remove archives (refuses a user\'s newest verified archive without --force).'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'prune' -d 'Remove the archives a retention policy does not keep (restic\'s forget rules).'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'restore' -d 'Put a user\'s stores back from an archive (the newest by default), verified first.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'reset' -d 'Empty a user\'s stores, keeping their schema, with a pre-reset safety archive.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'retire' -d 'Remove a user who left: a final archive, verified, then the user\'s folder.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'recover' -d 'Finish or roll back a restore, reset or retire that was interrupted.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'sync' -d 'Bring the mirror repositories up to date with the repository.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'follow' -d 'Ship every committed transaction of users\' WAL stores to the repository, about every second.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'adopt' -d 'Give archives written before hosts were part of archive names the names of today.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'config' -d 'Print the effective settings and where each came from (flag, environment, file, default).'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary" -eq 1' -fa 'help' -d 'Show subcommand help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary init" -ge 1' -fa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary init" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary users" -ge 1' -fka '(__granary_custom_completion ---completion users -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary users" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary backup" -ge 1' -fka '(__granary_custom_completion ---completion backup -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" all' -l 'all' -d 'Back up every user under the root.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" compression' -l 'compression' -d 'The archive\'s compression.' -rfka 'zstd gzip xz none'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" level' -l 'level' -d 'Compression level: zstd 1-19, gzip and xz 0-9 (default: zstd 3, gzip and xz 6).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" check' -l 'check' -d 'The check run on each snapshot (default: quick).' -rfka 'quick full none'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" label' -l 'label' -d 'A label added to the archive name (letters, digits, - and _).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" jobs' -l 'jobs' -d 'Users backed up at the same time, 1-64 (default: 1).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" prune' -l 'prune' -d 'After each successful backup, prune the user\'s archives with the configured [retention] policy.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" delta' -l 'delta' -d 'Write a delta (the pages changed since the newest backup) when a base fits, else a full with page hashes (delta = true in the configuration does the same).'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" full' -l 'full' -d 'With --delta or delta = true: write a full (with page hashes) whatever the delta policy says.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" no-delta' -l 'no-delta' -d 'Write a full without page hashes, as without --delta, whatever delta = in the configuration says.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup"' -l 'mirror' -d 'Also send each new archive to this repository (repeatable; replaces the configured mirrors).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup"' -l 'exclude' -d 'With --all, leave this user out (repeatable; adds to exclude in the configuration).' -rfka '(__granary_custom_completion ---completion backup -- --exclude (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary backup" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary list" -ge 1' -fka '(__granary_custom_completion ---completion list -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" all-hosts' -l 'all-hosts' -d 'List the archives of every host, not only this host\'s.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary list" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary verify" -ge 1' -fka '(__granary_custom_completion ---completion verify -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" user' -l 'user' -d 'Verify this user\'s archives.' -rfka '(__granary_custom_completion ---completion verify -- --user (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" all' -l 'all' -d 'Verify the archives of every user in the repository.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" latest' -l 'latest' -d 'Only each user\'s newest archive.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" check' -l 'check' -d 'integrity_check (full) or quick_check (quick).' -rfka 'full quick'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" force' -l 'force' -d 'Also verify archive files outside the repository (their result is not recorded).'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" chain' -l 'chain' -d 'Kept for scripts: a delta archive is always rebuilt from its whole chain and checked.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary verify" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary inspect" -eq 1' -fka '(__granary_custom_completion ---completion inspect -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary inspect" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary check" -ge 1' -fka '(__granary_custom_completion ---completion check -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check"' -l 'mirror' -d 'Also watch this mirror (repeatable; replaces the configured mirrors).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" max-age' -l 'max-age' -d 'The oldest a user\'s newest checked archive may be: 30min, 26h, 2d, 1w (default: 1d).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check"' -l 'exclude' -d 'Leave this user out when no user is named (repeatable; adds to exclude in the configuration).' -rfka '(__granary_custom_completion ---completion check -- --exclude (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" max-follow-lag' -l 'max-follow-lag' -d 'The most a followed user\'s shipped commits may lag behind now: 10s, 5min (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" nagios' -l 'nagios' -d 'Nagios plugin output: a status line first; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" textfile' -l 'textfile' -d 'Also write the results in Prometheus\' text format to this file (for node_exporter), atomically.' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary check" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary delete" -ge 1' -fka '(__granary_custom_completion ---completion delete -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" user' -l 'user' -d 'The user of archives given by NAME alone.' -rfka '(__granary_custom_completion ---completion delete -- --user (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" force' -l 'force' -d 'Remove even a user\'s newest verified archive, or an archive file outside the repository.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" dry-run' -l 'dry-run' -d 'Show what would be removed; remove nothing.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary delete" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary prune" -ge 1' -fka '(__granary_custom_completion ---completion prune -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" all' -l 'all' -d 'Prune every user in the repository.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-last' -l 'keep-last' -d 'Keep the N newest archives.' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-hourly' -l 'keep-hourly' -d 'Keep the newest archive of each of the last N hours that have one.' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-daily' -l 'keep-daily' -d 'Keep the newest archive of each of the last N days that have one.' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-weekly' -l 'keep-weekly' -d 'Keep the newest archive of each of the last N ISO weeks that have one.' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-monthly' -l 'keep-monthly' -d 'Keep the newest archive of each of the last N months that have one (-1: every month).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-yearly' -l 'keep-yearly' -d 'Keep the newest archive of each of the last N years that have one (-1: every year).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" keep-within' -l 'keep-within' -d 'Keep every archive taken within this long of the user\'s newest archive, as restic: 12h, 7d, 6mo, 1y, 1y6mo.' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" final-keep-within' -l 'final-keep-within' -d 'Keep final archives (what retired users left) this long (1y, 6mo, 90d), then remove every archive of a retired user (default: for ever).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" followed-keep-within' -l 'followed-keep-within' -d 'Keep follow\'s windows that ended within this long of now (7d, 12h), with their base archives; remove older ones\' segments (default: segments live as long as their base).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" dry-run' -l 'dry-run' -d 'Show what would be kept (and by which rule), merged and removed; remove nothing.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" no-merge' -l 'no-merge' -d 'Keep runs of deltas that only a kept delta needs instead of merging them.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary prune" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary restore" -eq 1' -fka '(__granary_custom_completion ---completion restore -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary restore" -eq 2' -fka '(__granary_custom_completion ---completion restore -- positional@1 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" at' -l 'at' -d 'The newest archive at or before this time: 2026-11-28 13:00 (local time), RFC 3339 (to the microsecond), an archive\'s stamp (YYYYMMDDTHHMMSS[.ffffff]Z), yesterday, or a duration ago (1d, 2h30min); a time to the second covers that second.' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" to' -l 'to' -d 'Restore into this folder instead, touching nothing live.' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" method' -l 'method' -d 'How each store is put in place.' -rfka 'auto swap online offline'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" dry-run' -l 'dry-run' -d 'Print the plan and change nothing.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" undo' -l 'undo' -d 'Put back what the last restore or reset of the user replaced (its safety archive).'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" owner-timeout' -l 'owner-timeout' -d 'How long an owner has to acknowledge the pause: 10s, 0.5 (default: 10s).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" force' -l 'force' -d 'Restore even when the stores or the Core Data model differ from the live ones.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" no-safety-archive' -l 'no-safety-archive' -d 'Do not keep the replaced content as a pre-restore archive.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" create' -l 'create' -d 'Create the user\'s folder when it does not exist (a new host, a moved or retired user).'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" owner' -l 'owner' -d 'With --create: the folder\'s owner, a user name or uid, and group (default: as the archive recorded).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" mode' -l 'mode' -d 'With --create: the folder\'s mode, in octal (default: as the archive recorded).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary restore" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary reset" -eq 1' -fka '(__granary_custom_completion ---completion reset -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" method' -l 'method' -d 'How each store is put in place.' -rfka 'auto swap online offline'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" dry-run' -l 'dry-run' -d 'Print the plan (the tables each store empties and keeps) and change nothing.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" owner-timeout' -l 'owner-timeout' -d 'How long an owner has to acknowledge the pause: 10s, 0.5 (default: 10s).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" no-safety-archive' -l 'no-safety-archive' -d 'Do not keep the replaced content as a pre-reset archive.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" y yes' -s 'y' -l 'yes' -d 'Do not ask: reset without a question (for scripts).'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary reset" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary retire" -eq 1' -fka '(__granary_custom_completion ---completion retire -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" y yes' -s 'y' -l 'yes' -d 'Do not ask: retire without a question (for scripts).'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" discard-others' -l 'discard-others' -d 'Retire even though the folder holds links, FIFOs, other special files or files of another owner, which no archive holds.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" owner-timeout' -l 'owner-timeout' -d 'How long an owner has to answer when granary asks whether it serves a store: 10s, 0.5 (default: 10s).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary retire" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary recover" -ge 1' -fka '(__granary_custom_completion ---completion recover -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary recover" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary sync" -ge 1' -fka '(__granary_custom_completion ---completion sync -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync"' -l 'mirror' -d 'Sync this mirror (repeatable; replaces the configured mirrors).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" dry-run' -l 'dry-run' -d 'Show what would be sent and removed; change nothing.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary sync" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary follow" -ge 1' -fka '(__granary_custom_completion ---completion follow -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" interval' -l 'interval' -d 'How often each user\'s commits are shipped: 10ms to 1h (default: follow_interval, 1s).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" once' -l 'once' -d 'Ship what is there (starting generations as needed), then exit.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" textfile' -l 'textfile' -d 'Also write each user\'s lag in Prometheus\' text format to this file after each round (for node_exporter), atomically.' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary follow" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary adopt" -ge 1' -fka '(__granary_custom_completion ---completion adopt -- positional@0 (count (__granary_tokens -pc)) (string length -- (commandline -ct)))'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" dry-run' -l 'dry-run' -d 'Show the names archives would get; change nothing.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" lock-timeout' -l 'lock-timeout' -d 'How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary adopt" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" root' -l 'root' -d 'Folder holding one sub-folder per user (env GRANARY_ROOT).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" repo' -l 'repo' -d 'Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).' -rfa '(__granary_complete_directories)'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" host' -l 'host' -d 'This host\'s name where hosts share a repository: new archives are this host\'s, and commands act on this host\'s archives (env GRANARY_HOST; default: the machine\'s host name).' -rfka ''
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" config' -l 'config' -d 'Configuration file (env GRANARY_CONFIG; see granary.toml(5)).' -rF
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" json' -l 'json' -d 'Print one JSON document on standard output, errors included.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" q quiet' -s 'q' -l 'quiet' -d 'Print errors only.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" v verbose' -s 'v' -l 'verbose' -d 'Print more detail.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" systemd' -l 'systemd' -d 'Print the systemd drop-in (ReadWritePaths=) for the shipped units from these settings.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary config" h help' -s 'h' -l 'help' -d 'Show help information.'
complete -c 'granary' -n '__granary_should_offer_completions_for_flags_or_options "granary help" version' -l 'version' -d 'Show the version.'
complete -c 'granary' -n '__granary_should_offer_completions_for_positional "granary help" -eq 1' -fa 'init users backup list verify inspect check delete prune restore reset retire recover sync follow adopt config'
