#!/bin/bash

__granary_cursor_index_in_current_word() {
    local remaining="${COMP_LINE}"

    local word
    for word in "${COMP_WORDS[@]::COMP_CWORD}"; do
        remaining="${remaining##*([[:space:]])"${word}"*([[:space:]])}"
    done

    local -ir index="$((COMP_POINT - ${#COMP_LINE} + ${#remaining}))"
    if [[ "${index}" -le 0 ]]; then
        printf 0
    else
        printf %s "${index}"
    fi
}

# positional arguments:
#
# - 1: the current (sub)command's count of positional arguments
#
# required variables:
#
# - repeating_flags: the repeating flags that the current (sub)command can accept
# - non_repeating_flags: the non-repeating flags that the current (sub)command can accept
# - repeating_options: the repeating options that the current (sub)command can accept
# - non_repeating_options: the non-repeating options that the current (sub)command can accept
# - positional_number: value ignored
# - unparsed_words: unparsed words from the current command line
#
# modified variables:
#
# - non_repeating_flags: remove flags for this (sub)command that are already on the command line
# - non_repeating_options: remove options for this (sub)command that are already on the command line
# - positional_number: set to the current positional number
# - unparsed_words: remove all flags, options, and option values for this (sub)command
__granary_offer_flags_options() {
    local -ir positional_count="${1}"
    positional_number=0

    local was_flag_option_terminator_seen=false
    local is_parsing_option_value=false

    local -ar unparsed_word_indices=("${!unparsed_words[@]}")
    local -i word_index
    for word_index in "${unparsed_word_indices[@]}"; do
        if "${is_parsing_option_value}"; then
            # This word is an option value:
            # Reset marker for next word iff not currently the last word
            [[ "${word_index}" -ne "${unparsed_word_indices[${#unparsed_word_indices[@]} - 1]}" ]] && is_parsing_option_value=false
            unset "unparsed_words[${word_index}]"
            # Do not process this word as a flag or an option
            continue
        fi

        local word="${unparsed_words["${word_index}"]}"
        if ! "${was_flag_option_terminator_seen}"; then
            case "${word}" in
            --)
                unset "unparsed_words[${word_index}]"
                # by itself -- is a flag/option terminator, but if it is the last word, it is the start of a completion
                if [[ "${word_index}" -ne "${unparsed_word_indices[${#unparsed_word_indices[@]} - 1]}" ]]; then
                    was_flag_option_terminator_seen=true
                fi
                continue
                ;;
            -*)
                # ${word} is a flag or an option
                # If ${word} is an option, mark that the next word to be parsed is an option value
                local option
                for option in "${repeating_options[@]}" "${non_repeating_options[@]}"; do
                    [[ "${word}" = "${option}" ]] && is_parsing_option_value=true && break
                done

                # Remove ${word} from ${non_repeating_flags} or ${non_repeating_options} so it isn't offered again
                local not_found=true
                local -i index
                for index in "${!non_repeating_flags[@]}"; do
                    if [[ "${non_repeating_flags[${index}]}" = "${word}" ]]; then
                        unset "non_repeating_flags[${index}]"
                        non_repeating_flags=("${non_repeating_flags[@]}")
                        not_found=false
                        break
                    fi
                done
                if "${not_found}"; then
                    for index in "${!non_repeating_flags[@]}"; do
                        if [[ "${non_repeating_flags[${index}]}" = "${word}" ]]; then
                            unset "non_repeating_flags[${index}]"
                            non_repeating_flags=("${non_repeating_flags[@]}")
                            break
                        fi
                    done
                fi
                unset "unparsed_words[${word_index}]"
                continue
                ;;
            esac
        fi

        # ${word} is neither a flag, nor an option, nor an option value
        if [[ "${positional_number}" -lt "${positional_count}" || "${positional_count}" -lt 0 ]]; then
            # ${word} is a positional
            ((positional_number++))
            unset "unparsed_words[${word_index}]"
        else
            if [[ -z "${word}" ]]; then
                # Could be completing a flag, option, or subcommand
                positional_number=-1
            else
                # ${word} is a subcommand or invalid, so stop processing this (sub)command
                positional_number=-2
            fi
            break
        fi
    done

    unparsed_words=("${unparsed_words[@]}")

    if\
        ! "${was_flag_option_terminator_seen}"\
        && ! "${is_parsing_option_value}"\
        && [[ ("${cur}" = -* && "${positional_number}" -ge 0) || "${positional_number}" -eq -1 ]]
    then
        COMPREPLY+=($(compgen -W "${repeating_flags[*]} ${non_repeating_flags[*]} ${repeating_options[*]} ${non_repeating_options[*]}" -- "${cur}"))
    fi
}

__granary_add_completions() {
    local completion
    while IFS='' read -r completion; do
        COMPREPLY+=("${completion}")
    done < <(IFS=$'\n' compgen "${@}" -- "${cur}")
}

__granary_custom_complete() {
    if [[ -n "${cur}" || -z ${COMP_WORDS[${COMP_CWORD}]} || "${COMP_LINE:${COMP_POINT}:1}" != ' ' ]]; then
        local -ar words=("${COMP_WORDS[@]}")
    else
        local -ar words=("${COMP_WORDS[@]::${COMP_CWORD}}" '' "${COMP_WORDS[@]:${COMP_CWORD}}")
    fi

    "${COMP_WORDS[0]}" "${@}" "${words[@]}"
}

# Candidates as data: one per line, never expanded or split (see scripts/patch-completions.py).
__granary_add_custom_completions() {
    local completion
    while IFS='' read -r completion; do
        # No candidate is no line: an empty one would be inserted (with -o filenames, as "zz/").
        [[ -n "${completion}" ]] && COMPREPLY+=("${completion}")
    done < <(__granary_custom_complete "${@}")
}

_granary() {
    local state
    state="$(shopt -p;shopt -po)"
    trap "${state//$'\n'/;}" RETURN
    shopt -s extglob
    set +o history +o posix

    local -xr SAP_SHELL=bash
    local -x SAP_SHELL_VERSION
    SAP_SHELL_VERSION="$(IFS='.';printf %s "${BASH_VERSINFO[*]}")"
    local -r SAP_SHELL_VERSION

    local -r cur="${2}"
    local -r prev="${3}"

    local -i positional_number
    local -a unparsed_words=("${COMP_WORDS[@]:1:${COMP_CWORD}}")

    local -a repeating_flags=()
    local -a non_repeating_flags=(--json -q --quiet -v --verbose --version -h --help)
    local -a repeating_options=()
    local -a non_repeating_options=(--root --repo --host --config)
    __granary_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    init|users|backup|list|verify|inspect|check|delete|prune|restore|reset|retire|recover|sync|follow|adopt|config|help)
        # Offer subcommand argument completions
        "_granary_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'init users backup list verify inspect check delete prune restore reset retire recover sync follow adopt config help' -- "${cur}"))
        ;;
    esac
}

_granary_init() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_completions -d
        return
        ;;
    esac
}

_granary_users() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion users -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_backup() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --all --prune --delta --full --no-delta --version -h --help)
    repeating_options=(--mirror --exclude)
    non_repeating_options=(--root --repo --host --config --compression --level --check --label --jobs --lock-timeout)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--compression')
        __granary_add_completions -W 'zstd'$'\n''gzip'$'\n''xz'$'\n''none'
        return
        ;;
    '--level')
        return
        ;;
    '--check')
        __granary_add_completions -W 'quick'$'\n''full'$'\n''none'
        return
        ;;
    '--label')
        return
        ;;
    '--jobs')
        return
        ;;
    '--lock-timeout')
        return
        ;;
    '--mirror')
        return
        ;;
    '--exclude')
        __granary_add_custom_completions ---completion backup -- --exclude "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion backup -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_list() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --all-hosts --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion list -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_verify() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --all --latest --force --chain --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --user --check)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--user')
        __granary_add_custom_completions ---completion verify -- --user "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    '--check')
        __granary_add_completions -W 'full'$'\n''quick'
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion verify -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_inspect() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config)
    __granary_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    1)
        __granary_add_custom_completions ---completion inspect -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_check() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --nagios --version -h --help)
    repeating_options=(--mirror --exclude)
    non_repeating_options=(--root --repo --host --config --max-age --max-follow-lag --textfile)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--mirror')
        return
        ;;
    '--max-age')
        return
        ;;
    '--exclude')
        __granary_add_custom_completions ---completion check -- --exclude "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    '--max-follow-lag')
        return
        ;;
    '--textfile')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion check -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_delete() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --force --dry-run --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --user --lock-timeout)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--user')
        __granary_add_custom_completions ---completion delete -- --user "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion delete -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_prune() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --all --dry-run --no-merge --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --keep-last --keep-hourly --keep-daily --keep-weekly --keep-monthly --keep-yearly --keep-within --final-keep-within --followed-keep-within --lock-timeout)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--keep-last')
        return
        ;;
    '--keep-hourly')
        return
        ;;
    '--keep-daily')
        return
        ;;
    '--keep-weekly')
        return
        ;;
    '--keep-monthly')
        return
        ;;
    '--keep-yearly')
        return
        ;;
    '--keep-within')
        return
        ;;
    '--final-keep-within')
        return
        ;;
    '--followed-keep-within')
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion prune -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_restore() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --dry-run --undo --force --no-safety-archive --create --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --at --to --method --owner-timeout --lock-timeout --owner --mode)
    __granary_offer_flags_options 2

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--at')
        return
        ;;
    '--to')
        __granary_add_completions -d
        return
        ;;
    '--method')
        __granary_add_completions -W 'auto'$'\n''swap'$'\n''online'$'\n''offline'
        return
        ;;
    '--owner-timeout')
        return
        ;;
    '--lock-timeout')
        return
        ;;
    '--owner')
        return
        ;;
    '--mode')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    1)
        __granary_add_custom_completions ---completion restore -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    2)
        __granary_add_custom_completions ---completion restore -- positional@1 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_reset() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --dry-run --no-safety-archive -y --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --method --owner-timeout --lock-timeout)
    __granary_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--method')
        __granary_add_completions -W 'auto'$'\n''swap'$'\n''online'$'\n''offline'
        return
        ;;
    '--owner-timeout')
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    1)
        __granary_add_custom_completions ---completion reset -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_retire() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose -y --yes --discard-others --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --owner-timeout --lock-timeout)
    __granary_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--owner-timeout')
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    1)
        __granary_add_custom_completions ---completion retire -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_recover() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --lock-timeout)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion recover -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_sync() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --dry-run --version -h --help)
    repeating_options=(--mirror)
    non_repeating_options=(--root --repo --host --config --lock-timeout)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--mirror')
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion sync -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_follow() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --once --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --interval --textfile)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--interval')
        return
        ;;
    '--textfile')
        __granary_add_completions -f
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion follow -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_adopt() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --dry-run --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config --lock-timeout)
    __granary_offer_flags_options -1

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    '--lock-timeout')
        return
        ;;
    esac

    # Offer positional completions
    case "${positional_number}" in
    *)
        __granary_add_custom_completions ---completion adopt -- positional@0 "${COMP_CWORD}" "$(__granary_cursor_index_in_current_word)"
        return
        ;;
    esac
}

_granary_config() {
    repeating_flags=()
    non_repeating_flags=(--json -q --quiet -v --verbose --systemd --version -h --help)
    repeating_options=()
    non_repeating_options=(--root --repo --host --config)
    __granary_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--root')
        __granary_add_completions -d
        return
        ;;
    '--repo')
        __granary_add_completions -d
        return
        ;;
    '--host')
        return
        ;;
    '--config')
        __granary_add_completions -f
        return
        ;;
    esac
}

_granary_help() {
    repeating_flags=()
    non_repeating_flags=(--version)
    repeating_options=()
    non_repeating_options=()
    __granary_offer_flags_options -1
    [[ "${cur}" = -* ]] || COMPREPLY+=($(compgen -W 'init users backup list verify inspect check delete prune restore reset retire recover sync follow adopt config' -- "${cur}"))
}

complete -o filenames -F _granary granary
