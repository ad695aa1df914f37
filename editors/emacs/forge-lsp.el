;;; forge-lsp.el --- Forge plans, review loops and findings through eglot  -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (eglot "1.9"))
;; Keywords: tools, languages

;;; Commentary:

;; forge-lsp is the language server of Forge: it publishes review findings as
;; diagnostics, serves plans and loop views as `forge://' documents and runs
;; development loops.  This package connects it to Emacs through eglot:
;;
;; - `forge-lsp-ensure' / `forge-lsp-mode' / `global-forge-lsp-mode' start the
;;   server for the git project of the current buffer (any major mode) and let
;;   it manage the buffer: findings appear as flymake diagnostics.
;; - `forge://' file names open as read-only buffers whose text comes from the
;;   server (`workspace/textDocumentContent'), refreshed when the server says
;;   they changed (`workspace/textDocumentContent/refresh').
;; - The loops of the project are shown in the mode line (`forge/loopStatus'
;;   and `$/progress'), and a message tells when a loop ends.
;; - Commands: `forge-lsp-findings', `forge-lsp-plans', `forge-lsp-index',
;;   `forge-lsp-loops', `forge-lsp-open-plan', `forge-lsp-execute-plan',
;;   `forge-lsp-cancel-loop', `forge-lsp-restart-loop',
;;   `forge-lsp-delete-finding', `forge-lsp-open-uri', `forge-lsp-command'.
;;
;; See README.md next to this file.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'eglot)
(require 'jsonrpc)
(require 'project)
(require 'flymake)
(require 'compile)
(require 'tabulated-list)
(require 'url-parse)
(require 'url-util)
(require 'autorevert)

(defvar eglot-lsp-context)               ; eglot's, bound while finding projects

(defgroup forge-lsp nil
  "Forge plans, loops and review findings through eglot."
  :group 'tools
  :prefix "forge-lsp-")

(defcustom forge-lsp-program "forge-lsp"
  "The forge-lsp executable: a name looked up in `exec-path' or a path."
  :type 'string)

(defcustom forge-lsp-program-args nil
  "Arguments for `forge-lsp-program' (for example (\"serve\" \"--stdio\"))."
  :type '(repeat string))

(defcustom forge-lsp-data-dir nil
  "Data directory for the server (initializationOptions.forge.dataDir).
Nil lets the server choose: FORGE_DATA_DIR, then
$XDG_DATA_HOME/forge-lsp, then ~/.local/share/forge-lsp."
  :type '(choice (const :tag "Server default" nil) directory))

(defcustom forge-lsp-config nil
  "Configuration overrides sent as initializationOptions.forge.config.
A plist mirroring the TOML keys, for example
  (:agent (:command [\"my-agent\" \"{prompt_file}\"])
   :sandbox (:enabled :json-false))
Use vectors for JSON arrays and `:json-false' for false."
  :type 'sexp)

(defcustom forge-lsp-initialization-options nil
  "More keys of initializationOptions.forge, as a plist.
For example (:session \"ses_...\")."
  :type 'sexp)

(defcustom forge-lsp-virtual-documents t
  "Non-nil: declare `workspace.textDocumentContent' and open `forge://' URIs.
Nil: let the server write read-only copies under <project>/.forge/view/
\(documents.materialize \"auto\") and open those files instead."
  :type 'boolean)

(defcustom forge-lsp-replay-diagnostics t
  "Non-nil: show a file's last published findings again when it is reopened.
eglot 1.9 forgets the diagnostics of a buffer when it is killed; the
server republishes them on `didOpen', and this replays the last
publication in case it arrives late or not at all."
  :type 'boolean)

(defcustom forge-lsp-mode-line-finished-seconds 60
  "How long a loop that ended stays in the mode line, in seconds."
  :type 'integer)

(defcustom forge-lsp-request-timeout 30
  "Seconds to wait for a reply to a command before giving up."
  :type 'integer)

(defvar forge-lsp-loop-status-functions nil
  "Abnormal hook run for every `forge/loopStatus': (SERVER PARAMS).")

(defvar forge-lsp-loop-end-functions nil
  "Abnormal hook run once when a loop ends: (SERVER NAME STATUS PARAMS).")

(defvar forge-lsp-message-functions nil
  "Abnormal hook run for every `window/showMessage' of the server.
Arguments: (SERVER TYPE TEXT).")

(defvar forge-lsp-progress-functions nil
  "Abnormal hook run for every `$/progress' of the server: (SERVER TOKEN VALUE).")

(defconst forge-lsp--terminal-statuses '("completed" "cancelled" "errored" "stalled"))

;;;; The server class

(defclass forge-lsp-server (eglot-lsp-server)
  ((loops :initform (make-hash-table :test #'equal) :accessor forge-lsp--loops
          :documentation "Loop name -> last `forge/loopStatus' params (plist).")
   (progress :initform (make-hash-table :test #'equal) :accessor forge-lsp--progress
             :documentation "Progress token -> plist (:title :message :percentage).")
   (announced :initform (make-hash-table :test #'equal) :accessor forge-lsp--announced
              :documentation "Loop name -> time its end was told to the user.")
   (ended :initform (make-hash-table :test #'equal) :accessor forge-lsp--ended
          :documentation "Loop name -> status it ended with (hooks ran).")
   (diagnostics :initform (make-hash-table :test #'equal) :accessor forge-lsp--diag-cache
                :documentation "File truename -> last published diagnostics."))
  :documentation "An eglot connection to forge-lsp.")

(cl-defmethod eglot-client-capabilities ((_server forge-lsp-server))
  "Declare virtual documents and work-done progress on top of eglot's set."
  (let* ((caps (cl-call-next-method))
         (workspace (copy-sequence (plist-get caps :workspace))))
    (when forge-lsp-virtual-documents
      (setq workspace (plist-put workspace :textDocumentContent
                                 '(:dynamicRegistration :json-false))))
    (setq caps (plist-put (copy-sequence caps) :workspace workspace))
    (plist-put caps :window '(:workDoneProgress t :showMessage (:messageActionItem (:additionalPropertiesSupport :json-false))))))

(cl-defmethod eglot-initialization-options ((_server forge-lsp-server))
  "initializationOptions.forge from the customization."
  (let ((forge (copy-sequence forge-lsp-initialization-options)))
    (when forge-lsp-data-dir
      (setq forge (plist-put forge :dataDir (expand-file-name forge-lsp-data-dir))))
    (when forge-lsp-config
      (setq forge (plist-put forge :config forge-lsp-config)))
    (list :forge (or forge (make-hash-table)))))

(defun forge-lsp--live-p (server)
  (and server (cl-typep server 'forge-lsp-server) (jsonrpc-running-p server)))

(defun forge-lsp--servers ()
  "All live forge-lsp connections."
  (let (all)
    (maphash (lambda (_project servers)
               (dolist (s servers) (when (forge-lsp--live-p s) (push s all))))
             eglot--servers-by-project)
    (nreverse all)))

(defvar forge-lsp--last-server nil
  "The forge-lsp connection used last (for `forge://' buffers and commands).")

(defvar forge-lsp--opening-server nil
  "Bound to the connection a `forge://' file is being opened from.")

(defvar-local forge-lsp--buffer-server nil
  "The forge-lsp connection a `forge://' buffer was read from.")

(defvar-local forge-lsp--buffer-root nil
  "The project root of the server a `forge://' buffer was read from.
A directory name.  It outlives that server: a later server of another
project does not take the buffer (`forge-lsp--reattach-documents'), and
commands in it name the project whose server is not running.")
(put 'forge-lsp--buffer-root 'permanent-local t)

(defvar-local forge-lsp--list-server nil
  "The forge-lsp connection a loops or findings list was made from.")

(defvar-local forge-lsp--was-managed nil
  "Non-nil once a forge-lsp server managed this file buffer.
A new server of its project (after the last one died) manages it again,
whatever its major mode.")
(put 'forge-lsp--was-managed 'permanent-local t)

(defun forge-lsp--server-of-project (project)
  (cl-find-if #'forge-lsp--live-p (gethash project eglot--servers-by-project)))

(defun forge-lsp--server-root (server)
  "The project root of SERVER, as an absolute directory name."
  (file-name-as-directory (expand-file-name (project-root (eglot--project server)))))

(defun forge-lsp--document-root ()
  "The project root a `forge://' buffer belongs to, or nil.
That is `forge-lsp--buffer-root', else its server's."
  (or forge-lsp--buffer-root
      (and forge-lsp--buffer-server (forge-lsp--server-root forge-lsp--buffer-server))))

(defun forge-lsp--root-server (root)
  "The live forge-lsp connection of the project rooted at ROOT, or nil."
  (cl-find-if (lambda (s) (equal (forge-lsp--server-root s) root)) (forge-lsp--servers)))

(defun forge-lsp-current-server (&optional noerror any)
  "The forge-lsp connection for the current buffer.
That is the connection of a `forge://' buffer or of a loops or findings
list, else the one of the buffer's project.  A buffer outside any
project has none (a review found it used the last project's), unless
ANY: then the last connection used (the mode line does so).  A
`forge://' name being visited, not yet any project's, is read from the
last connection used.  Signal a `user-error' saying why there is none,
unless NOERROR."
  (let* ((forge (or (forge-lsp--forge-name-p default-directory)
                    (forge-lsp--forge-name-p buffer-file-name)))
         (root (and forge (forge-lsp--document-root)))
         (project (and (not (forge-lsp--forge-name-p default-directory))
                       (let ((eglot-lsp-context t)) (project-current nil))))
         (last (or (and (forge-lsp--live-p forge-lsp--last-server) forge-lsp--last-server)
                   (car (forge-lsp--servers))))
         (server
          (or (and (forge-lsp--live-p forge-lsp--buffer-server) forge-lsp--buffer-server)
              (and (forge-lsp--live-p forge-lsp--list-server) forge-lsp--list-server)
              (let ((s (and project (eglot-current-server))))
                (and (forge-lsp--live-p s) s))
              (and project (forge-lsp--server-of-project project))
              (and root (forge-lsp--root-server root))
              ;; A forge:// name being visited (`C-x C-f'): no project of its own yet.
              (and forge (not project) (not root) last)
              (and any (not project) (not root) last))))
    (when server (setq forge-lsp--last-server server))
    (or server
        (unless noerror
          (cond
           ((or project root)
            (user-error "forge-lsp is not running for %s: run M-x forge-lsp-ensure in one of its files"
                        (abbreviate-file-name (if project (project-root project) root))))
           (forge
            (user-error "forge-lsp is not running: open a file of a git project and run M-x forge-lsp-ensure"))
           (t
            (user-error "forge-lsp: %s is not inside a git repository: Forge works on git projects"
                        (abbreviate-file-name (or buffer-file-name default-directory)))))))))

(defun forge-lsp-session-id (&optional server)
  "The session id of SERVER's connection.
That is capabilities.experimental.forge.sessionId of its initialize result."
  (let ((server (or server (forge-lsp-current-server))))
    (plist-get (plist-get (plist-get (eglot--capabilities server) :experimental) :forge)
               :sessionId)))

;;;; jsonrpc 1.0.14 (Emacs 28): messages left behind by a synchronous reply

;; `jsonrpc-request' returns by throwing out of the process filter when its
;; reply is parsed; messages that arrived in the same chunk after the reply
;; stay unparsed in the process buffer until the server writes again.  A
;; notification sent right after a reply (plan warnings after
;; `workspace/textDocumentContent', diagnostics after a command) would wait
;; for the next unrelated message.  Parse them on the next turn of the loop.

(defun forge-lsp--drain (server)
  "Parse the messages of SERVER that wait in its process buffer."
  (let ((proc (ignore-errors (jsonrpc--process server))))
    (when (and proc (process-live-p proc) (buffer-live-p (process-buffer proc))
               (fboundp 'jsonrpc--process-filter))
      (jsonrpc--process-filter proc ""))))

(defun forge-lsp--after-request (fn connection &rest args)
  (unwind-protect (apply fn connection args)
    (when (cl-typep connection 'forge-lsp-server)
      (run-at-time 0 nil #'forge-lsp--drain connection))))

(advice-add 'jsonrpc-request :around #'forge-lsp--after-request)

;;;; Starting the server for a buffer

(define-error 'forge-lsp-refused "forge-lsp")
(define-error 'forge-lsp-skipped "forge-lsp" 'forge-lsp-refused)

(defun forge-lsp--refuse (fmt &rest args)
  (signal 'forge-lsp-refused (list (apply #'format-message fmt args))))

(defun forge-lsp--program ()
  "The absolute path of the server program, or refuse with a clear message."
  (let ((p forge-lsp-program))
    (cond ((or (null p) (string-empty-p p))
           (forge-lsp--refuse "`forge-lsp-program' is empty: set it to the forge-lsp executable"))
          ((file-name-absolute-p p)
           (if (file-executable-p p) p
             (forge-lsp--refuse "the server program %s does not exist or is not executable (customize `forge-lsp-program')" p)))
          ((executable-find p))
          (t (forge-lsp--refuse "cannot find the server program `%s' in PATH (install forge-lsp or customize `forge-lsp-program')" p)))))

(defun forge-lsp--git-root (dir)
  "The top of the git work tree holding DIR, or nil."
  (when-let ((found (and dir (not (forge-lsp--forge-name-p dir))
                         (locate-dominating-file dir ".git"))))
    (file-name-as-directory (expand-file-name found))))

(defun forge-lsp--has-commit-p (root)
  (let ((default-directory root))
    (condition-case nil
        (eq 0 (process-file "git" nil nil nil "rev-parse" "--verify" "--quiet" "HEAD^{commit}"))
      (file-missing (forge-lsp--refuse "git is not installed: forge-lsp needs git to identify the project")))))

(defun forge-lsp--stderr-tail (server)
  "The last lines the server wrote on standard error."
  (when-let ((buf (ignore-errors (jsonrpc-stderr-buffer server))))
    (when (buffer-live-p buf)
      (with-current-buffer buf
        (let ((text (string-trim (buffer-substring-no-properties
                                  (max (point-min) (- (point-max) 600)) (point-max)))))
          (unless (string-empty-p text) text))))))

(defvar forge-lsp--started nil
  "The connection `eglot--connect' created last (see `forge-lsp--connect').")

(defun forge-lsp--note-started (server)
  (when (cl-typep server 'forge-lsp-server) (setq forge-lsp--started server)))

(add-hook 'eglot-server-initialized-hook #'forge-lsp--note-started)

(defun forge-lsp--abandon (conn)
  "Forget CONN, a connection that failed to start, without later errors.
eglot would otherwise signal \"Server died\" whenever the dead process
is finally reaped, long after its start was given up."
  (when conn
    (let ((pending (jsonrpc--request-continuations conn)))
      (maphash (lambda (_id triplet) (when (timerp (nth 2 triplet)) (cancel-timer (nth 2 triplet))))
               pending)
      (clrhash pending))
    (setf (eglot--shutdown-requested conn) t)
    (let ((proc (ignore-errors (jsonrpc--process conn))))
      (when (processp proc)
        (let ((inhibit-message t))
          (ignore-errors (delete-process proc)))))))

(defun forge-lsp--connect (project root)
  "Start forge-lsp for PROJECT (rooted at ROOT) managing the current major mode.
Return the connection, or refuse with the reason it failed."
  (let* ((program (forge-lsp--program))
         (contact (cons program forge-lsp-program-args))
         (forge-lsp--started nil)
         (server nil)
         (failure nil))
    (condition-case err
        ;; eglot waits `eglot-sync-connect' seconds, but its wait ends at the
        ;; first output of any process and then it returns the connection as
        ;; if it were up.  Wait briefly there, and for the outcome below.
        (let ((eglot-sync-connect (if (numberp eglot-sync-connect) (min eglot-sync-connect 1) 1)))
          (eglot--connect (list major-mode) project 'forge-lsp-server contact "forge"))
      (error (setq failure (forge-lsp--connect-error-text err))))
    (let ((conn forge-lsp--started))
      (unless failure
        ;; Up means registered by eglot after a reply to initialize.
        (let ((end (+ (float-time) eglot-connect-timeout)))
          (while (and (not (setq server (forge-lsp--server-of-project project)))
                      (forge-lsp--process-alive-p conn)
                      (< (float-time) end))
            (accept-process-output nil 0.1)))
        (unless server
          (setq failure (if (forge-lsp--process-alive-p conn)
                            (format "no reply to initialize within %s s" eglot-connect-timeout)
                          "it exited at once"))))
      (when failure
        (let ((tail nil) (end (+ (float-time) 1.0)))
          ;; Its standard error arrives through its own pipe: give it a moment.
          (while (and (not (setq tail (or (and conn (forge-lsp--stderr-tail conn))
                                          (forge-lsp--stderr-tail-by-name root))))
                      (< (float-time) end))
            (accept-process-output nil 0.05))
          (forge-lsp--abandon conn)
          (forge-lsp--refuse "the server failed to start in %s (%s)%s"
                             (abbreviate-file-name root) failure
                             (if tail (format "; its last output:\n%s" tail)
                               "; it wrote nothing on standard error"))))
      server)))

(defun forge-lsp--process-alive-p (conn)
  (let ((proc (and conn (ignore-errors (jsonrpc--process conn)))))
    (and (processp proc) (memq (process-status proc) '(run open listen connect stop)) t)))

(defun forge-lsp--connect-error-text (err)
  (let ((msg (error-message-string err)))
    (cond ((string-match-p "not running\\|Server died\\|-1:" msg) "it exited at once")
          ((string-match-p "Timed out" msg) "no reply to initialize")
          (t (string-remove-prefix "[eglot] " msg)))))

(defun forge-lsp--stderr-tail-by-name (root)
  (let* ((nick (file-name-base (directory-file-name root)))
         (buf (cl-find-if (lambda (b) (string-match-p (concat "\\` ?\\*EGLOT (" (regexp-quote nick) "/.*stderr\\*\\'")
                                                      (buffer-name b)))
                          (buffer-list))))
    (when buf
      (with-current-buffer buf
        (let ((text (string-trim (buffer-substring-no-properties
                                  (max (point-min) (- (point-max) 600)) (point-max)))))
          (unless (string-empty-p text) text))))))

(defvar forge-lsp--global-refused (make-hash-table :test #'equal)
  "Roots `global-forge-lsp-mode' was refused for (said once per root).
A root leaves it when `forge-lsp-ensure' starts or reaches its server.")

(defun forge-lsp--eglot-supported-p ()
  "Whether the loaded eglot has the internals this package builds on.
They are eglot 1.9's (Emacs 28): later eglot versions renamed the URI
helpers (`eglot-path-to-uri'), made a server's language ids a list
\(`eglot--languages') and changed `eglot--connect' to match."
  (and (fboundp 'eglot--language-id)
       (not (fboundp 'eglot--languages))
       (not (fboundp 'eglot-path-to-uri))))

(defun forge-lsp--ensure-1 ()
  "Attach the current buffer to its project's forge-lsp server, starting it."
  (unless (forge-lsp--eglot-supported-p)
    (forge-lsp--refuse "this eglot is newer than the 1.9 this package is written and tested for, and it changed the eglot internals the package builds on (URI helpers, language ids); it would misbehave, so it does nothing.  Use eglot 1.9 (Emacs 28), or another editor's forge-lsp package"))
  (unless buffer-file-name
    (forge-lsp--refuse "this buffer visits no file"))
  (when (forge-lsp--forge-name-p buffer-file-name)
    (forge-lsp--refuse "forge:// documents are managed already"))
  (let* ((root (or (forge-lsp--git-root default-directory)
                   (forge-lsp--refuse "%s is not inside a git repository: Forge works on git projects"
                                      (abbreviate-file-name buffer-file-name))))
         (project (eglot--current-project))
         (existing (forge-lsp--server-of-project project))
         (current (eglot-current-server))
         (other (or (and eglot--managed-mode current (not (cl-typep current 'forge-lsp-server)) current)
                    ;; Another server of the project takes this mode's buffers.
                    (cl-find-if (lambda (s) (and (not (cl-typep s 'forge-lsp-server)) (jsonrpc-running-p s)
                                                 (memq major-mode (eglot--major-modes s))))
                                (gethash project eglot--servers-by-project)))))
    (cond
     (other
      (signal 'forge-lsp-skipped
              (list (format "this buffer is managed by %s; eglot 1.9 allows one server per buffer, so Forge findings are not shown here (M-x forge-lsp-findings lists them; the forge-lsp-* commands work)"
                            (jsonrpc-name other)))))
     ((and eglot--managed-mode (forge-lsp--live-p current)) current)
     (existing
      (cl-pushnew major-mode (eglot--major-modes existing))
      (setq eglot--cached-server nil)
      (eglot--maybe-activate-editing-mode)
      existing)
     (t
      (unless (forge-lsp--has-commit-p root)
        (forge-lsp--refuse "the repository %s has no commit yet: Forge identifies a project by its first commit, so commit something first, then run M-x forge-lsp-ensure"
                           (abbreviate-file-name root)))
      (forge-lsp--connect (eglot--current-project) (project-root project))))))

;;;###autoload
(defun forge-lsp-ensure (&optional interactive)
  "Start forge-lsp for the git project of this buffer and let it manage the buffer.
Usable in any major mode, and in hooks (then failures are messages,
not errors).  INTERACTIVE is non-nil when called as a command."
  (interactive (list t))
  (condition-case err
      (let ((server (forge-lsp--ensure-1)))
        (when server
          (setq forge-lsp--last-server server)
          (forge-lsp--install-mode-line)
          ;; `global-forge-lsp-mode' attaches the repository's buffers again.
          (when-let ((root (forge-lsp--git-root default-directory)))
            (remhash root forge-lsp--global-refused)))
        server)
    (forge-lsp-refused
     (let ((msg (concat "forge-lsp: " (cadr err))))
       (if interactive (user-error "%s" msg) (message "%s" msg))
       nil))))

;;;###autoload
(define-minor-mode forge-lsp-mode
  "Let forge-lsp manage this buffer: Forge findings as flymake diagnostics.
Turning it on runs `forge-lsp-ensure'; turning it off stops managing
the buffer (the server keeps running for the project)."
  :lighter nil
  (cond
   (forge-lsp-mode
    (unless (forge-lsp-ensure (called-interactively-p 'any))
      (setq forge-lsp-mode nil)))
   (t
    ;; Off is off, whether or not a server manages the buffer now (one that died): a new
    ;; server of the project does not take it back (a review).
    (setq forge-lsp--was-managed nil)
    (when (and eglot--managed-mode (cl-typep (eglot-current-server) 'forge-lsp-server))
      (eglot--signal-textDocument/didClose)
      (eglot--managed-mode -1)))))

(defcustom forge-lsp-global-modes t
  "Major modes `global-forge-lsp-mode' acts in: t (all), or a list of modes.
A list may start with `not' to name the modes it leaves alone."
  :type '(choice (const :tag "All" t) (repeat symbol)))

(defun forge-lsp--global-mode-p (mode)
  (cond ((eq forge-lsp-global-modes t) t)
        ((eq (car-safe forge-lsp-global-modes) 'not)
         (not (apply #'provided-mode-derived-p mode (cdr forge-lsp-global-modes))))
        (t (apply #'provided-mode-derived-p mode forge-lsp-global-modes))))

(defun forge-lsp--global-attach (buffer)
  "Let forge-lsp manage BUFFER unless another eglot server does."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (unless eglot--managed-mode
        (when-let ((root (forge-lsp--git-root default-directory)))
          (unless (gethash root forge-lsp--global-refused)
            (condition-case err
                (when (forge-lsp--ensure-1)
                  (setq forge-lsp-mode t)
                  (forge-lsp--install-mode-line))
              (forge-lsp-skipped nil)
              (forge-lsp-refused
               ;; Said once per repository: no commit, no program, no start.
               (puthash root t forge-lsp--global-refused)
               (message "forge-lsp: %s" (cadr err))))))))))

(defun forge-lsp--global-turn-on ()
  (when (and buffer-file-name
             (not (forge-lsp--forge-name-p buffer-file-name))
             (not (forge-lsp--view-file-p buffer-file-name))
             (not (file-remote-p buffer-file-name))
             (not eglot--managed-mode)
             (forge-lsp--global-mode-p major-mode))
    (if noninteractive
        (forge-lsp--global-attach (current-buffer))
      ;; Like `eglot-ensure': after the command, so that a language server the
      ;; user starts for this buffer (eglot-ensure in a mode hook) goes first.
      (let ((buffer (current-buffer)))
        (letrec ((attach (lambda ()
                           (remove-hook 'post-command-hook attach)
                           (forge-lsp--global-attach buffer))))
          (add-hook 'post-command-hook attach 'append))))))

;;;###autoload
(define-globalized-minor-mode global-forge-lsp-mode forge-lsp-mode forge-lsp--global-turn-on
  :group 'forge-lsp)

;;;###autoload
(defun forge-lsp-eglot-contact (&optional _interactive)
  "A contact for `eglot-server-programs': (forge-lsp-server PROGRAM ARGS...).
For example: (add-to-list \\='eglot-server-programs
               \\='((markdown-mode text-mode) . forge-lsp-eglot-contact))"
  (cons 'forge-lsp-server (cons forge-lsp-program forge-lsp-program-args)))

;;;; Commands over workspace/executeCommand

(defun forge-lsp--error-text (err)
  "A readable text for the jsonrpc error ERR."
  (let* ((data (cdr err))
         (msg (and (listp data) (cdr (assq 'jsonrpc-error-message data))))
         (code (and (listp data) (cdr (assq 'jsonrpc-error-code data)))))
    (cond ((and msg (eql code -1)) "the server died (M-x eglot-stderr-buffer shows why)")
          ((equal msg "Timed out") (format "no reply within %s s" forge-lsp-request-timeout))
          (msg msg)
          (t (error-message-string err)))))

(defun forge-lsp-command (tool &optional input server)
  "Run the Forge tool TOOL (e.g. \"plan-read\") with INPUT (a plist) on SERVER.
Return its result, the plist (:text TEXT :data DATA).  Failures signal
a `user-error' carrying the server's message."
  (let ((server (or server (forge-lsp-current-server))))
    (unless (forge-lsp--live-p server)
      (user-error "forge-lsp: the server is not running (it exited; M-x forge-lsp-ensure starts it again)"))
    (condition-case err
        (jsonrpc-request server :workspace/executeCommand
                         (list :command (concat "forge." tool)
                               :arguments (vector (or input (make-hash-table))))
                         :timeout forge-lsp-request-timeout)
      (jsonrpc-error
       (user-error "forge %s: %s" tool (forge-lsp--error-text err))))))

(defun forge-lsp--first-line (text)
  (car (split-string (or text "") "\n")))

(defun forge-lsp--loop-list (&optional server)
  "The loops of the project, as plists (data.loops of forge.loop-status)."
  (append (plist-get (plist-get (forge-lsp-command "loop-status" nil server) :data) :loops) nil))

(defun forge-lsp--loop-names (&optional pred server)
  (let ((names (mapcar (lambda (l) (plist-get l :loopName))
                       (cl-remove-if-not (or pred #'identity) (forge-lsp--loop-list server)))))
    (cl-remove-duplicates (delq nil names) :test #'equal :from-end t)))

(defun forge-lsp--active-p (loop)
  "Non-nil for a loop that can be cancelled."
  (not (member (plist-get loop :status) '("completed" "cancelled"))))

(defun forge-lsp--restartable-p (loop)
  "Non-nil for a loop that can be restarted (any that did not complete)."
  (not (equal (plist-get loop :status) "completed")))

(defun forge-lsp--read-loop (prompt &optional pred)
  (let ((names (forge-lsp--loop-names pred)))
    (unless names (user-error "forge-lsp: no loop to choose from"))
    (completing-read prompt names nil t nil nil (car names))))

;;;###autoload
(defun forge-lsp-open-uri (uri)
  "Open the Forge document URI (forge://...) in a read-only buffer."
  (interactive
   (list (let ((at (thing-at-point 'filename t)))
           (read-string "Forge URI: " (and at (string-match "forge://[^] \t\n)>\"']+" at)
                                           (match-string 0 at))))))
  (unless (string-prefix-p "forge://" uri)
    (user-error "forge-lsp: not a forge:// URI: %s" uri))
  (let* ((server (forge-lsp-current-server))
         (view (forge-lsp--view-path server uri)))
    (setq forge-lsp--last-server server)
    (if (and (not (forge-lsp--virtual-p server)) (file-exists-p view))
        (find-file view)
      ;; Fetch first so that an unknown URI is an error, not an empty buffer; a session
      ;; plan not written yet opens empty (saving it stores it).
      (condition-case err
          (forge-lsp--fetch server uri t)
        (file-missing
         (unless (forge-lsp--session-plan-p uri)
           (signal (car err) (cdr err)))))
      (unless (forge-lsp--virtual-p server)
        (message "forge: %s has no copy under .forge/view/ yet; showing it from the server (no live refresh: M-x revert-buffer)" uri))
      ;; One buffer per forge:// name: a buffer showing it from another project's
      ;; server is replaced (before, it was shown as this project's: a review), unless it
      ;; holds unsaved edits.
      (when-let ((old (get-file-buffer uri)))
        (let ((old-server (buffer-local-value 'forge-lsp--buffer-server old))
              (old-root (with-current-buffer old (forge-lsp--document-root))))
          (when (or (and old-server (not (eq old-server server)))
                    ;; A buffer left detached when its project's server ended.
                    (and old-root (not (equal old-root (forge-lsp--server-root server)))))
            (if (buffer-modified-p old)
                (user-error "forge-lsp: %s is open with unsaved edits from the project %s; save or kill that buffer first"
                            uri (abbreviate-file-name (or old-root (forge-lsp--server-root old-server))))
              (kill-buffer old)))))
      (let ((forge-lsp--opening-server server))
        (find-file uri)))))

;;;###autoload
(defun forge-lsp-index ()
  "Open forge://index.md: the project's recent plans, loops and findings."
  (interactive)
  (forge-lsp-open-uri "forge://index.md"))

;;;###autoload
(defun forge-lsp-plans ()
  "Choose one of the project's recent plans and open it."
  (interactive)
  (let* ((data (plist-get (forge-lsp-command "plan-read" '(:recent t :count 50)) :data))
         (plans (append (plist-get data :plans) nil))
         (choices (mapcar (lambda (p)
                            (cons (format "%s%s  %s"
                                          (or (plist-get p :label) "")
                                          (if (plist-get p :loopName)
                                              (format " [loop %s]" (plist-get p :loopName)) "")
                                          (or (plist-get p :firstLine) ""))
                                  p))
                          plans)))
    (unless choices (user-error "forge-lsp: no plans in this project yet"))
    (let ((choice (completing-read "Plan: " choices nil t nil nil (caar choices))))
      (forge-lsp-open-uri (plist-get (cdr (assoc choice choices)) :uri)))))

;;;###autoload
(defun forge-lsp-open-plan (&optional loop)
  "Open the plan of LOOP, or this connection's session plan when LOOP is empty."
  (interactive
   (list (completing-read "Loop plan (empty: my session plan): "
                          (ignore-errors (forge-lsp--loop-names)) nil nil)))
  (forge-lsp-open-uri
   (if (or (null loop) (string-empty-p loop))
       (format "forge://plan/session/%s.md" (forge-lsp-session-id))
     (format "forge://plan/loop/%s.md" loop))))

(defun forge-lsp--buffer-plan ()
  "(SESSION-ID . TEXT) when the current buffer shows a session plan."
  (when (and buffer-file-name
             (string-match "\\`forge://plan/session/\\([^/]+\\)\\.md\\'" buffer-file-name))
    (cons (match-string 1 buffer-file-name)
          (buffer-substring-no-properties (point-min) (point-max)))))

(defun forge-lsp--plan-lines (text)
  "The lines of TEXT outside fenced code blocks (``` or ~~~), in order.
A fence closes at a line of only its character, at least as many of
them as opened it (as the Neovim plugin's `plan_names' reads a plan)."
  (let (fence lines)
    (dolist (line (split-string (or text "") "\r?\n"))
      (let ((f (and (string-match "\\`[ \t]*\\(```+\\|~~~+\\)" line) (match-string 1 line))))
        (cond
         (fence
          (when (and f (eq (aref f 0) (aref fence 0)) (>= (length f) (length fence))
                     (string-match-p "\\`[ \t]*[`~]+[ \t]*\\'" line))
            (setq fence nil)))
         (f (setq fence f))
         (t (push line lines)))))
    (nreverse lines)))

(defun forge-lsp--plan-title (text)
  "The first heading of the plan TEXT outside code fences, or \"Plan\"."
  (or (cl-some (lambda (line)
                 (and (string-match "\\`#+[ \t]+\\(.+\\)\\'" line) (string-trim (match-string 1 line))))
               (forge-lsp--plan-lines text))
      "Plan"))

(defun forge-lsp--plan-loop-name (text)
  "The first `Loop Name:' line of the plan TEXT outside code fences, or nil.
A plan that shows an example `Loop Name:' in a code block is not named by
it (a review; the Neovim plugin skips fences too)."
  (cl-some (lambda (line)
             (and (string-match "\\`Loop Name:[ \t]*\\(.+\\)\\'" line)
                  (string-trim (match-string 1 line))))
           (forge-lsp--plan-lines text)))

;;;###autoload
(defun forge-lsp-execute-plan (title &optional plan loop-name mode)
  "Start a loop (MODE \"loop\") for PLAN with TITLE and LOOP-NAME.
Interactively the plan is the session plan shown in the current
buffer, else one chosen among the recent plans, and the loop name
offered is the plan's `Loop Name:' line (outside code fences).
From Lisp, each argument left nil is not sent, and the server chooses:
PLAN nil runs this connection's stored session plan; LOOP-NAME nil
names the loop after TITLE (its slug, made unique among the project's
loops), not after the plan's `Loop Name:' line (pass
\(forge-lsp--plan-loop-name PLAN) for that); MODE nil is \"loop\"
\(\"new-session\" starts one agent session instead)."
  (interactive
   (let* ((here (forge-lsp--buffer-plan))
          (text (if here (cdr here)
                  (let* ((data (plist-get (forge-lsp-command "plan-read" '(:recent t :count 50)) :data))
                         (plans (append (plist-get data :plans) nil))
                         (choices (mapcar (lambda (p) (cons (format "%s  %s" (plist-get p :label)
                                                                    (or (plist-get p :firstLine) ""))
                                                            p))
                                          plans)))
                    (unless choices (user-error "forge-lsp: no plan to execute: write one first"))
                    (let ((p (cdr (assoc (completing-read "Execute plan: " choices nil t) choices))))
                      (forge-lsp--fetch (forge-lsp-current-server) (plist-get p :uri))))))
          (title (read-string "Loop title: " (forge-lsp--plan-title text)))
          (name (read-string "Loop name (empty: from the title): " (forge-lsp--plan-loop-name text))))
     (list title text (unless (string-empty-p name) name) "loop")))
  (let* ((input (list :title title)))
    (when plan (setq input (plist-put input :plan plan)))
    (when loop-name (setq input (plist-put input :loopName loop-name)))
    (when mode (setq input (plist-put input :mode mode)))
    (let* ((result (forge-lsp-command "execute-plan" input))
           (name (plist-get (plist-get result :data) :loopName)))
      (message "forge: %s%s" (forge-lsp--first-line (plist-get result :text))
               (if name (format " Loop %s: see the mode line, M-x forge-lsp-loops" name) ""))
      result)))

;;;###autoload
(defun forge-lsp-cancel-loop (name)
  "Cancel the loop NAME."
  (interactive (list (forge-lsp--read-loop "Cancel loop: " #'forge-lsp--active-p)))
  (let ((result (forge-lsp-command "loop-cancel" (list :name name))))
    (message "forge: %s" (forge-lsp--first-line (plist-get result :text)))
    result))

;;;###autoload
(defun forge-lsp-restart-loop (name &optional force)
  "Restart the loop NAME (FORCE: also when it is still running)."
  (interactive (list (forge-lsp--read-loop "Restart loop: " #'forge-lsp--restartable-p)
                     current-prefix-arg))
  (let* ((input (list :name name :restart t))
         (result (condition-case err
                     (forge-lsp-command "loop-status" (if force (plist-put input :force t) input))
                   (user-error
                    (if (and (not force) (called-interactively-p 'any)
                             (string-match-p "force" (error-message-string err))
                             (y-or-n-p (format "%s\nForce the restart? " (error-message-string err))))
                        (forge-lsp-command "loop-status" (plist-put input :force t))
                      (signal (car err) (cdr err)))))))
    (message "forge: %s" (forge-lsp--first-line (plist-get result :text)))
    result))

;;;; Loops list

(defvar forge-lsp-loops-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'forge-lsp-loops-open-status)
    (define-key map "p" #'forge-lsp-loops-open-plan)
    (define-key map "c" #'forge-lsp-loops-cancel)
    (define-key map "r" #'forge-lsp-loops-restart)
    (define-key map "f" #'forge-lsp-loops-findings)
    map))

(define-derived-mode forge-lsp-loops-mode tabulated-list-mode "Forge loops"
  "The loops of a project.
RET status, p plan, c cancel, r restart, f findings, g refresh."
  (setq tabulated-list-format [("Loop" 24 t) ("Status" 10 t) ("Phase" 12 t)
                               ("Section" 8 nil) ("Iter" 5 nil) ("Reason" 0 nil)])
  (add-hook 'tabulated-list-revert-hook #'forge-lsp--loops-refresh nil t)
  (tabulated-list-init-header))

(defun forge-lsp--loops-refresh ()
  (let ((loops (forge-lsp--loop-list forge-lsp--list-server)))
    (setq tabulated-list-entries
          (mapcar (lambda (l)
                    (let ((total (plist-get l :totalSections)))
                      (list (plist-get l :loopName)
                            (vector (or (plist-get l :loopName) "")
                                    ;; Recorded as running, its server ended: nothing runs it.
                                    (if (numberp (plist-get l :serverGone))
                                        "server stopped"
                                      (format "%s" (or (plist-get l :status) "")))
                                    (format "%s" (or (plist-get l :phase) ""))
                                    (if (and (numberp total) (> total 0))
                                        (format "%s/%s" (1+ (or (plist-get l :sectionIndex) 0)) total)
                                      "-")
                                    (format "%s" (or (plist-get l :iteration) ""))
                                    (format "%s" (or (plist-get l :terminationReason) ""))))))
                  loops))))

;;;###autoload
(defun forge-lsp-loops ()
  "List the project's loops."
  (interactive)
  (let ((server (forge-lsp-current-server)))
    (with-current-buffer (get-buffer-create (format "*forge loops: %s*" (eglot-project-nickname server)))
      (forge-lsp-loops-mode)
      (setq forge-lsp--list-server server)
      (setq default-directory (project-root (eglot--project server)))
      (forge-lsp--loops-refresh)
      (tabulated-list-print t)
      (pop-to-buffer (current-buffer)))))

(defun forge-lsp--loop-at-point ()
  (or (tabulated-list-get-id) (user-error "No loop on this line")))

(defun forge-lsp-loops-open-status ()
  "Open the status document of the loop at point."
  (interactive)
  (let ((forge-lsp--last-server forge-lsp--list-server))
    (forge-lsp-open-uri (format "forge://loop/%s/status.md" (forge-lsp--loop-at-point)))))

(defun forge-lsp-loops-open-plan ()
  "Open the plan of the loop at point."
  (interactive)
  (let ((forge-lsp--last-server forge-lsp--list-server))
    (forge-lsp-open-uri (format "forge://plan/loop/%s.md" (forge-lsp--loop-at-point)))))

(defun forge-lsp-loops-cancel ()
  "Cancel the loop at point."
  (interactive)
  (let ((forge-lsp--last-server forge-lsp--list-server))
    (forge-lsp-cancel-loop (forge-lsp--loop-at-point)))
  (revert-buffer))

(defun forge-lsp-loops-restart (&optional force)
  "Restart the loop at point (FORCE with a prefix argument)."
  (interactive "P")
  (let ((forge-lsp--last-server forge-lsp--list-server))
    (forge-lsp-restart-loop (forge-lsp--loop-at-point) force))
  (revert-buffer))

(defun forge-lsp-loops-findings ()
  "Show the findings of the loop at point."
  (interactive)
  (let ((forge-lsp--last-server forge-lsp--list-server))
    (forge-lsp-findings (forge-lsp--loop-at-point))))

;;;; Findings

(defvar-local forge-lsp--findings-args nil
  "The arguments `forge-lsp-findings' made a findings buffer with.")

(defvar forge-lsp-findings-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "d" #'forge-lsp-findings-delete)
    ;; compilation-mode's `g' (and its menu's and tool bar's Recompile) ran `recompile',
    ;; that is `make -k' in the project (a review): here they read the findings again.
    (define-key map "g" #'revert-buffer)
    (define-key map [remap recompile] #'revert-buffer)
    map))

(define-compilation-mode forge-lsp-findings-mode "Forge findings"
  "Review findings, one per line as FILE:LINE: severity: description.
RET or \\[next-error] visits a finding, d deletes it, g reads them again."
  (setq-local compilation-error-regexp-alist
              '(("^\\([^:\n]+\\):\\([0-9]+\\): \\(?:bug\\|\\(warning\\)\\):" 1 2 nil (3 . nil))))
  (setq-local compilation-error-face 'error)
  ;; Not compilation-mode's `compilation-revert-buffer', which runs `recompile'.
  (setq-local revert-buffer-function #'forge-lsp--findings-revert))

(defun forge-lsp--findings-revert (&rest _)
  "`revert-buffer-function' of a findings buffer: read the findings again."
  (unless forge-lsp--list-server
    (user-error "forge-lsp: this buffer was not made by M-x forge-lsp-findings"))
  (let ((forge-lsp--last-server forge-lsp--list-server))
    (apply #'forge-lsp-findings forge-lsp--findings-args)))

(defun forge-lsp--unfinished-loops (server)
  "Names of SERVER's project loops that have not completed (none if unreadable)."
  (let ((loops (condition-case err
                   (plist-get (plist-get (forge-lsp-command "loop-status" nil server) :data) :loops)
                 (user-error (message "forge-lsp: loops not listed: %s" (cadr err)) nil))))
    (delq nil (mapcar (lambda (l) (unless (equal (plist-get l :status) "completed") (plist-get l :loopName)))
                      (append loops nil)))))

(defun forge-lsp--format-finding (f)
  (let ((desc (replace-regexp-in-string "\n" " " (or (plist-get f :description) ""))))
    (propertize
     (format "%s:%s: %s: %s%s%s\n"
             (plist-get f :file) (plist-get f :line) (plist-get f :severity) desc
             (if (plist-get f :loopName) (format " [loop %s%s]" (plist-get f :loopName)
                                                 (if (numberp (plist-get f :sectionIndex))
                                                     (format ", section %s" (1+ (plist-get f :sectionIndex)))
                                                   ""))
               "")
             (format " (#%s)" (plist-get f :id)))
     'forge-lsp-finding f)))

;;;###autoload
(defun forge-lsp-findings (&optional loop)
  "List the project's review findings (of LOOP when given) in a compilation buffer.
With a prefix argument, ask for the loop."
  (interactive (list (when current-prefix-arg (forge-lsp--read-loop "Findings of loop: "))))
  (let* ((server (forge-lsp-current-server))
         (root (project-root (eglot--project server)))
         (read (lambda (input)
                 (append (plist-get (plist-get (forge-lsp-command "review-read" input server) :data) :findings)
                         nil)))
         ;; Without a loop: the findings outside loops, then those of every loop that
         ;; has not completed (review-read reads one scope per call).
         (findings (if loop (funcall read (list :loopName loop :allSections t))
                     (apply #'append (funcall read nil)
                            ;; A loop that cannot be read (swept meanwhile) is left out.
                            (mapcar (lambda (name)
                                      (condition-case err (funcall read (list :loopName name :allSections t))
                                        (user-error (message "forge-lsp: findings of loop %s left out: %s" name (cadr err))
                                                    nil)))
                                    (forge-lsp--unfinished-loops server)))))
         (buf (get-buffer-create (format "*forge findings: %s*" (eglot-project-nickname server)))))
    (with-current-buffer buf
      (let ((inhibit-read-only t))
        (erase-buffer)
        (setq default-directory root)
        (forge-lsp-findings-mode)
        (setq forge-lsp--list-server server
              forge-lsp--findings-args (list loop))
        (insert (format "Forge findings in %s%s: %d\n\n" (abbreviate-file-name root)
                        (if loop (format ", loop %s" loop) "") (length findings)))
        (dolist (f findings) (insert (forge-lsp--format-finding f)))
        (goto-char (point-min))
        (compilation--ensure-parse (point-max))))
    (display-buffer buf)
    findings))

(defun forge-lsp-findings-delete ()
  "Delete the finding on this line."
  (interactive)
  (let ((f (or (get-text-property (line-beginning-position) 'forge-lsp-finding)
               (user-error "No finding on this line"))))
    (when (or (not (called-interactively-p 'any))
              (y-or-n-p (format "Delete finding %s:%s? " (plist-get f :file) (plist-get f :line))))
      (let ((forge-lsp--last-server forge-lsp--list-server))
        (forge-lsp-command "review-delete"
                           (append (list :file (plist-get f :file) :line (plist-get f :line))
                                   (when (plist-get f :loopName) (list :loopName (plist-get f :loopName)))))
        (revert-buffer)))))

(defun forge-lsp--finding-actions (&optional beg end)
  "The `Delete finding' code actions of the server between BEG and END."
  (let ((beg (or beg (line-beginning-position)))
        (end (or end (line-end-position))))
    (cl-remove-if-not
     (lambda (a)
       (let ((cmd (plist-get a :command)))
         (equal (if (stringp cmd) cmd (plist-get cmd :command)) "forge.review-delete")))
     (eglot-code-actions beg end))))

(defun forge-lsp--execute-action (server action)
  (let* ((cmd (plist-get action :command))
         (cmd (if (stringp cmd) action cmd)))
    (condition-case err
        (eglot-execute-command server (intern (plist-get cmd :command)) (plist-get cmd :arguments))
      (jsonrpc-error (user-error "forge: %s" (forge-lsp--error-text err))))))

;;;###autoload
(defun forge-lsp-delete-finding ()
  "Delete the Forge finding on the current line.
This runs the server's `Delete finding' code action."
  (interactive)
  (let* ((server (forge-lsp-current-server))
         (actions (forge-lsp--finding-actions)))
    (unless actions (user-error "forge-lsp: no finding on this line"))
    (let ((action (if (cdr actions)
                      (let ((choices (mapcar (lambda (a) (cons (plist-get a :title) a)) actions)))
                        (cdr (assoc (completing-read "Delete: " choices nil t) choices)))
                    (car actions))))
      (let ((result (forge-lsp--execute-action server action)))
        (message "forge: %s" (or (and (listp result) (forge-lsp--first-line (plist-get result :text)))
                                 (plist-get action :title)))
        action))))

;;;; Loop status, progress and messages

(defun forge-lsp--terminal-p (status) (member status forge-lsp--terminal-statuses))

(defun forge-lsp--tell-loop-end (server name status params)
  (unless (gethash name (forge-lsp--announced server))
    (puthash name (float-time) (forge-lsp--announced server))
    (let ((reason (plist-get params :terminationReason)))
      (message "forge: loop %s %s%s" name status
               (if (and reason (not (equal reason status))) (format " (%s)" reason) ""))))
  (unless (gethash name (forge-lsp--ended server))
    (puthash name status (forge-lsp--ended server))
    (run-hook-with-args 'forge-lsp-loop-end-functions server name status params)))

(defun forge-lsp--on-loop-status (server params)
  (let* ((name (plist-get params :loopName))
         (status (plist-get params :status))
         (table (forge-lsp--loops server))
         (prev (gethash name table)))
    (when name
      (puthash name (append (list :receivedAt (float-time)) params) table)
      (cond
       ((not (forge-lsp--terminal-p status))
        (remhash name (forge-lsp--announced server))
        (remhash name (forge-lsp--ended server)))
       ((or (and prev (not (forge-lsp--terminal-p (plist-get prev :status))))
            ;; Ended while we were not watching it run, but just now.
            (and (not prev) (numberp (plist-get params :completedAt))
                 (< (- (float-time) (/ (plist-get params :completedAt) 1000.0)) 60)))
        (forge-lsp--tell-loop-end server name status params)))
      (run-hook-with-args 'forge-lsp-loop-status-functions server params)
      (force-mode-line-update t))))

(cl-defmethod eglot-handle-notification
  ((server forge-lsp-server) (_method (eql forge/loopStatus)) &rest params)
  "Handle Forge's loop status notification."
  (forge-lsp--on-loop-status server params))

(cl-defmethod eglot-handle-notification
  ((server forge-lsp-server) (_method (eql window/showMessage)) &key type message)
  "Show the server's messages as forge messages; a loop end is told only once."
  (run-hook-with-args 'forge-lsp-message-functions server type message)
  (let ((loop (and (stringp message)
                   (string-match "\\`\\(?:Forge: \\)?[Ll]oop \\([^ ]+\\) \\(?:was \\|has \\)?\\(?:completed\\|cancelled\\|errored\\|stalled\\|ended\\|failed\\)" message)
                   (match-string 1 message))))
    (if (and loop (gethash loop (forge-lsp--announced server)))
        nil
      (when loop (puthash loop (float-time) (forge-lsp--announced server)))
      (message "forge: %s" (if (and (numberp type) (<= type 1))
                               (propertize message 'face 'error)
                             message)))))

(cl-defmethod eglot-handle-request
  ((server forge-lsp-server) (_method (eql window/workDoneProgress/create)) &key token)
  "Accept a work-done progress token."
  (puthash (format "%s" token) (list :title nil) (forge-lsp--progress server))
  nil)

(cl-defmethod eglot-handle-notification
  ((server forge-lsp-server) (_method (eql $/progress)) &key token value)
  "Track work-done progress (one per running loop)."
  (let* ((key (format "%s" token))
         (table (forge-lsp--progress server))
         (old (gethash key table)))
    (run-hook-with-args 'forge-lsp-progress-functions server key value)
    (pcase (plist-get value :kind)
      ("end" (remhash key table))
      (_ (puthash key
                  (list :title (or (plist-get value :title) (plist-get old :title))
                        :message (or (plist-get value :message) (plist-get old :message))
                        :percentage (or (plist-get value :percentage) (plist-get old :percentage)))
                  table)))
    (force-mode-line-update t)))

(defun forge-lsp--progress-for (server name)
  (let (found)
    (maphash (lambda (_k v) (when (equal (plist-get v :title) (concat "Forge: " name)) (setq found v)))
             (forge-lsp--progress server))
    found))

(defun forge-lsp-loop-statuses (&optional server)
  "The last `forge/loopStatus' of each loop of SERVER, as plists."
  (let ((server (or server (forge-lsp-current-server t t))) all)
    (when server
      (maphash (lambda (_k v) (push v all)) (forge-lsp--loops server)))
    (sort all (lambda (a b) (string< (plist-get a :loopName) (plist-get b :loopName))))))

(defun forge-lsp--loop-segment (server l)
  (let* ((name (plist-get l :loopName))
         (status (plist-get l :status))
         (total (plist-get l :totalSections))
         (progress (forge-lsp--progress-for server name))
         (pct (plist-get progress :percentage)))
    (cond
     ((forge-lsp--terminal-p status)
      (propertize (format "%s:%s" name status)
                  'face (if (equal status "completed") 'success 'warning)))
     ;; Recorded as running, but its server ended (`serverGone'): nothing runs it.
     ((numberp (plist-get l :serverGone))
      (propertize (format "%s:server-stopped" name) 'face 'warning))
     (t
      (format "%s:%s%s #%s%s" name
              (or (plist-get l :phase) status)
              (if (and (numberp total) (> total 0))
                  (format " %s/%s" (1+ (or (plist-get l :sectionIndex) 0)) total) "")
              (or (plist-get l :iteration) 0)
              (if (numberp pct) (format " %d%%" pct) ""))))))

(defun forge-lsp-mode-line-string ()
  "The mode line text for the loops of the current project's forge-lsp."
  (let ((server (forge-lsp-current-server t t)))
    (if (not server) ""
      (let ((now (float-time)) parts)
        (dolist (l (forge-lsp-loop-statuses server))
          (let ((status (plist-get l :status)))
            (when (or (not (forge-lsp--terminal-p status))
                      (member status '("errored" "stalled"))
                      ;; Since it ended (`completedAt'), not since it was last heard of:
                      ;; the replay at every connect re-sends loops that ended long ago.
                      (< (- now (let ((c (plist-get l :completedAt)))
                                  (if (numberp c) (/ c 1000.0) (plist-get l :receivedAt))))
                         forge-lsp-mode-line-finished-seconds))
              (push (forge-lsp--loop-segment server l) parts))))
        (if (null parts) ""
          (propertize (concat " Forge[" (string-join (nreverse parts) " ") "]")
                      'help-echo "Forge loops: mouse-1 lists them"
                      'mouse-face 'mode-line-highlight
                      'local-map (let ((map (make-sparse-keymap)))
                                   (define-key map [mode-line mouse-1] #'forge-lsp-loops)
                                   map)))))))

(defvar forge-lsp--mode-line '(:eval (forge-lsp-mode-line-string)))
(put 'forge-lsp--mode-line 'risky-local-variable t)

(defun forge-lsp--install-mode-line ()
  (unless (member 'forge-lsp--mode-line global-mode-string)
    (setq global-mode-string
          (append (if (listp global-mode-string) global-mode-string (list global-mode-string))
                  '(forge-lsp--mode-line)))))

;;;; Diagnostics replay

(cl-defmethod eglot-handle-notification :before
  ((server forge-lsp-server) (_method (eql textDocument/publishDiagnostics)) &key uri diagnostics
   &allow-other-keys)
  "Remember the last diagnostics of every file."
  (when (stringp uri)
    (puthash (forge-lsp--uri-key uri) diagnostics (forge-lsp--diag-cache server))))

(defun forge-lsp--uri-key (uri)
  ;; eglot 1.9 leaves a path's bytes undecoded (`/tmp/\303\244'): decoded, it
  ;; names the buffer's file.
  (if (string-prefix-p "forge:" uri) uri
    (file-truename (decode-coding-string (eglot--uri-to-path uri) 'utf-8))))

(defun forge-lsp--replay-diagnostics ()
  (when (and forge-lsp-replay-diagnostics eglot--managed-mode buffer-file-name)
    (let ((server (eglot-current-server)))
      (when (forge-lsp--live-p server)
        (let* ((key (if (forge-lsp--forge-name-p buffer-file-name) buffer-file-name
                      (file-truename buffer-file-name)))
               (diags (gethash key (forge-lsp--diag-cache server))))
          (when (and diags (> (length diags) 0))
            (let ((eglot--cached-server server))
              (eglot-handle-notification server 'textDocument/publishDiagnostics
                                         :uri (eglot--path-to-uri buffer-file-name)
                                         :diagnostics diags))))))))

(add-hook 'eglot-managed-mode-hook #'forge-lsp--replay-diagnostics)

;;;; forge:// documents

(defconst forge-lsp--file-name-regexp "\\(?:\\`\\|/\\)forge://"
  "File names handled by `forge-lsp--file-name-handler'.")

(defun forge-lsp--forge-name-p (name)
  (and (stringp name) (string-match-p forge-lsp--file-name-regexp name)))

(defun forge-lsp--normalize (name)
  "NAME from its forge:// on (what a `//' after a directory means)."
  (substring name (string-match "forge://" name)))

(defun forge-lsp--virtual-p (server)
  (and forge-lsp-virtual-documents server
       (plist-get (plist-get (eglot--capabilities server) :workspace) :textDocumentContent)))

(defun forge-lsp--view-path (server uri)
  "The materialized copy of URI under <project>/.forge/view/."
  (expand-file-name (concat ".forge/view/" (substring uri (length "forge://")))
                    (project-root (eglot--project server))))

(defvar forge-lsp--content-cache (make-hash-table :test #'equal)
  "URI -> (TIME . TEXT) of recent fetches, so that one open fetches once.")

(defun forge-lsp--fetch (server uri &optional fresh)
  "The text of URI from SERVER; signals `file-missing' when it does not exist."
  (let ((cached (gethash uri forge-lsp--content-cache)))
    (if (and cached (not fresh) (< (- (float-time) (car cached)) 2))
        (cdr cached)
      (unless (forge-lsp--live-p server)
        (signal 'file-error (list "forge-lsp is not running (open a file of the project and run M-x forge-lsp-ensure)" uri)))
      (let ((text (condition-case err
                      (plist-get (jsonrpc-request server :workspace/textDocumentContent (list :uri uri)
                                                  :timeout forge-lsp-request-timeout)
                                 :text)
                    (jsonrpc-error
                     (let ((code (cdr (assq 'jsonrpc-error-code (cdr err)))))
                       (if (eql code 1002)
                           (signal 'file-missing (list "Opening Forge document" (forge-lsp--error-text err) uri))
                         (signal 'file-error (list (format "forge-lsp: %s" (forge-lsp--error-text err)) uri))))))))
        (puthash uri (cons (float-time) (or text "")) forge-lsp--content-cache)
        (or text "")))))

(defun forge-lsp--document-server ()
  "The connection serving `forge://' names in the current context.
Outside any project (`C-x C-f forge://...' from *scratch*), a name is read
from the last connection used; a `forge://' buffer keeps its project's."
  (or (and (forge-lsp--live-p forge-lsp--opening-server) forge-lsp--opening-server)
      (and (forge-lsp--live-p forge-lsp--buffer-server) forge-lsp--buffer-server)
      (forge-lsp-current-server t t)))

(defun forge-lsp--run-real (operation args)
  (let ((inhibit-file-name-handlers
         (cons 'forge-lsp--file-name-handler
               (and (eq inhibit-file-name-operation operation) inhibit-file-name-handlers)))
        (inhibit-file-name-operation operation))
    (apply operation args)))

(defun forge-lsp--expand (name dir)
  (cond
   ((forge-lsp--forge-name-p name) (forge-lsp--normalize name))
   ((or (file-name-absolute-p name) (not (forge-lsp--forge-name-p dir)))
    (forge-lsp--run-real 'expand-file-name (list name (if (forge-lsp--forge-name-p dir) "/" dir))))
   (t
    (let* ((dir (file-name-as-directory (forge-lsp--normalize dir)))
           (parts (split-string (concat (substring dir (length "forge://")) name) "/"))
           (out nil))
      (dolist (p parts)
        (cond ((member p '("." "")) (when (and (equal p "") (null out)) nil))
              ((equal p "..") (pop out))
              (t (push p out))))
      (concat "forge://" (string-join (nreverse out) "/")
              (if (and (string-suffix-p "/" name) out) "/" ""))))))

(defun forge-lsp--directory (name)
  (let* ((name (forge-lsp--normalize name))
         (rest (substring name (length "forge://")))
         (slash (cl-position ?/ rest :from-end t)))
    (if slash (concat "forge://" (substring rest 0 (1+ slash))) "forge://")))

(defun forge-lsp--document-p (name)
  "Non-nil when NAME looks like a Forge document (not a directory)."
  (let ((n (forge-lsp--normalize name)))
    (and (string-suffix-p ".md" n) (> (length n) (length "forge://")))))

(defun forge-lsp--directory-p (name)
  "Non-nil when NAME is a directory of Forge documents (forge://plan/session/...).
Emacs passes directory names here without their last slash."
  (let* ((n (forge-lsp--normalize name))
         (last (car (last (split-string (substring n (length "forge://")) "/" t)))))
    (or (string-suffix-p "/" n) (null last) (not (string-match-p "\\." last)))))

(defun forge-lsp--session-plan-p (name)
  "Non-nil when NAME is a session plan's URI.
It is the one kind of document that can be saved."
  (and (stringp name)
       (string-match-p "\\`forge://plan/session/[^/]+\\.md\\'" (forge-lsp--normalize name))))

(defvar-local forge-lsp--open-error nil
  "Why the last visit of this `forge://' buffer's document failed.
An error object.")

(defvar-local forge-lsp--new-plan nil
  "Non-nil in the buffer of a session plan that is not stored yet.
Such a buffer opens writable.")
(put 'forge-lsp--new-plan 'permanent-local t)

(defvar-local forge-lsp--base-uri nil
  "The `forge://' document whose stored text `forge-lsp--base' is.")
(put 'forge-lsp--base-uri 'permanent-local t)

(defvar-local forge-lsp--base nil
  "The stored text this `forge://' buffer last read or saved.
`none' when no plan was stored, `unknown' when a save could not read
it back.  Saving compares the stored plan with it, so a write made
elsewhere meanwhile is not undone.")
(put 'forge-lsp--base 'permanent-local t)

(defun forge-lsp--stored-text (server uri)
  "The stored text of URI now, or `none' when there is none."
  (condition-case nil
      (forge-lsp--fetch server uri t)
    (file-missing 'none)))

(defvar-local forge-lsp--crlf nil
  "Non-nil when the document this buffer shows ends its lines in CRLF.
The buffer holds them as plain newlines (no ^M on every line); a save
writes them back as CRLF.")
(put 'forge-lsp--crlf 'permanent-local t)

(defun forge-lsp--crlf-p (text)
  "Non-nil when every line break of TEXT is CRLF (and it has one)."
  (and (string-match-p "\r\n" text)
       (not (string-match-p "\n" (replace-regexp-in-string "\r\n" "" text t t)))))

(defun forge-lsp--shown-text (text)
  "TEXT as a buffer shows it: CRLF line ends as newlines (`forge-lsp--crlf')."
  (if (forge-lsp--crlf-p text) (replace-regexp-in-string "\r\n" "\n" text t t) text))

(defun forge-lsp--insert-file-contents (filename &optional visit beg end replace)
  (let* ((uri (forge-lsp--normalize filename))
         (server (forge-lsp--document-server))
         (text (condition-case err
                   (if (not (forge-lsp--document-p uri))
                       (signal 'file-missing (list "Opening Forge document" "Not a Forge document" uri))
                     (if server (forge-lsp--fetch server uri (and replace (not visit)))
                       (signal 'file-error (list "forge-lsp is not running (open a file of the project and run M-x forge-lsp-ensure)" uri))))
                 (error
                  ;; As for any file: a visit that fails still visits the name (Emacs reads
                  ;; `buffer-file-name' next); `forge-lsp--not-found' decides what is shown.
                  (when visit
                    (setq buffer-file-name uri)
                    (setq forge-lsp--open-error err))
                  (signal (car err) (cdr err)))))
         (crlf (forge-lsp--crlf-p text))
         (stored text)
         (text (forge-lsp--shown-text text))
         (text (if (or beg end) (substring text (or beg 0) (min (length text) (or end (length text)))) text)))
    (let ((inhibit-read-only t))
      (if replace
          (let ((p (point)))
            (erase-buffer) (insert text) (goto-char (min p (point-max))))
        (save-excursion (insert text))))
    (when visit
      (setq buffer-file-name uri)
      (when server
        (setq forge-lsp--buffer-server server
              forge-lsp--buffer-root (forge-lsp--server-root server)))
      (unless (or beg end) (setq forge-lsp--base stored forge-lsp--base-uri uri forge-lsp--crlf crlf))
      ;; A visit whose modification time is left unknown counts as one of a missing file:
      ;; `insert-file-contents' then signals "Opening input file: Success" after this
      ;; returns, which made `revert-buffer' of every forge:// buffer fail (found while
      ;; testing the save check). A time given here is set without asking the handler.
      (set-visited-file-modtime (current-time))
      (set-buffer-modified-p nil))
    (list uri (length text))))

(defun forge-lsp--not-found ()
  "For `find-file-not-found-functions': a `forge://' name the server cannot serve.
This connection's session plan, not written yet, opens as an empty,
writable buffer that saving stores (`forge.plan-write'); for anything
else the buffer goes and the server's reason is the error (an unknown
URI, no server)."
  ;; Emacs also signals here after a document was read: a visit whose modification time
  ;; is unknown counts as of a missing file. Only a failed read has `forge-lsp--open-error'.
  (when (and (forge-lsp--forge-name-p buffer-file-name) forge-lsp--open-error)
    (let ((err forge-lsp--open-error))
      (if (and (forge-lsp--session-plan-p buffer-file-name) (eq (car err) 'file-missing)
               (forge-lsp--document-server)
               ;; This connection's own plan: a mistyped id is an error, not a new plan.
               (equal (forge-lsp--normalize buffer-file-name)
                      (format "forge://plan/session/%s.md"
                              (forge-lsp-session-id (forge-lsp--document-server)))))
          (progn
            (setq forge-lsp--new-plan t)
            (message "forge: no plan stored for this session yet: write it here, C-x C-s stores it")
            t)
        (set-buffer-modified-p nil)
        (kill-buffer (current-buffer))
        (signal (car err) (cdr err))))))

(add-hook 'find-file-not-found-functions #'forge-lsp--not-found)

(defun forge-lsp--ask (question)
  "Ask QUESTION (yes or no); in batch Emacs the answer is no."
  (and (not noninteractive) (yes-or-no-p question)))

(defun forge-lsp--check-unchanged (uri now base content)
  "Refuse to store CONTENT as the plan URI if it changed since it was read.
NOW is the plan stored now (`none': none, nil: unknown), BASE what the
buffer read (`forge-lsp--base'; `unknown' skips the check).  A plan an
agent, a shell or another editor wrote meanwhile (perhaps while the
server was down) would be undone without a word: ask first, and in
batch Emacs or on no, signal a `file-error'; the buffer keeps its text."
  (when (and now (not (eq base 'unknown)) (not (equal now base)) (not (equal now content))
             (not (forge-lsp--ask (format "%s was changed since this buffer read it (from a shell, an agent or another editor); save over it? " uri))))
    (signal 'file-error
            (list (format "%s was changed since this buffer read it; not saved (M-x revert-buffer loads the stored plan, losing your edits)" uri) uri))))

(defun forge-lsp--write-region (start end filename &optional append visit &rest _)
  (let* ((uri (forge-lsp--normalize filename))
         (server (forge-lsp--document-server)))
    (unless (string-match "\\`forge://plan/session/\\([^/]+\\)\\.md\\'" uri)
      (signal 'file-error (list "Forge documents are read-only (only session plans can be saved)" uri)))
    (when append (signal 'file-error (list "Cannot append to a Forge plan" uri)))
    (unless (forge-lsp--live-p server)
      ;; A buffer whose project's server ended stays that project's: it is not saved elsewhere.
      (let ((root (forge-lsp--document-root)))
        (signal 'file-error
                (list (if root
                          (format "forge-lsp is not running for %s: not saved (M-x forge-lsp-ensure in one of its files, then save again)"
                                  (abbreviate-file-name root))
                        "forge-lsp is not running: not saved (open a file of the project and run M-x forge-lsp-ensure)")
                      uri))))
    (let* ((session (match-string 1 uri))
           (content (if (stringp start) start
                      (buffer-substring-no-properties (or start (point-min)) (or end (point-max)))))
           ;; A CRLF plan is stored with CRLF line ends, as it was read.
           (content (if forge-lsp--crlf (replace-regexp-in-string "\r?\n" "\r\n" content t t) content))
           ;; The buffer's own document is the one its text was read from
           ;; (`forge-lsp--base-uri'), not its name: `write-file' renames the buffer
           ;; before it writes (a review found such writes compared with the old plan).
           (own (equal forge-lsp--base-uri uri))
           (now (and server (or (not own) (not (eq forge-lsp--base 'unknown)))
                     (forge-lsp--stored-text server uri)))
           (base (or forge-lsp--base 'none)))
      (if own
          (forge-lsp--check-unchanged uri now base content)
        ;; Another plan's name that holds a different plan: not replaced unasked, as a
        ;; file is not (a review found it replaced without a word).
        (when (and (stringp now) (not (equal now content))
                   (not (forge-lsp--ask (format "%s holds another plan; write over it? " uri))))
          (signal 'file-error (list (format "%s holds another plan; not written" uri) uri))))
      (let ((result (forge-lsp-command "plan-write" (list :content content :session_id session) server)))
        (when (or (eq visit t) (stringp visit))
          (set-buffer-modified-p nil))
        ;; A buffer that visits the target now (`write-file') is that plan's from here on.
        (when (and (not own) buffer-file-name (equal (forge-lsp--normalize buffer-file-name) uri))
          (setq forge-lsp--base-uri uri own t))
        (when own
          (setq forge-lsp--base (or (and server (ignore-errors (forge-lsp--stored-text server uri))) 'unknown)))
        ;; Stored now: like any stored plan, it opens read-only the next time.
        (setq forge-lsp--new-plan nil)
        (message "forge: %s" (car (split-string (or (plist-get result :text) "") "\n")))
        nil))))

(defun forge-lsp--file-name-handler (operation &rest args)
  "Handle `forge://' file names: documents served by forge-lsp."
  (pcase operation
    ('expand-file-name (forge-lsp--expand (nth 0 args) (nth 1 args)))
    ('substitute-in-file-name (forge-lsp--normalize (nth 0 args)))
    ('file-name-directory (forge-lsp--directory (nth 0 args)))
    ('file-name-nondirectory
     (let ((n (forge-lsp--normalize (nth 0 args))))
       (substring n (length (forge-lsp--directory n)))))
    ('file-name-as-directory
     (let ((n (forge-lsp--normalize (nth 0 args)))) (if (string-suffix-p "/" n) n (concat n "/"))))
    ('directory-file-name
     (let ((n (forge-lsp--normalize (nth 0 args))))
       (if (or (equal n "forge://") (not (string-suffix-p "/" n))) n (substring n 0 -1))))
    ((or 'file-truename 'file-chase-links) (forge-lsp--normalize (nth 0 args)))
    ((or 'file-remote-p 'file-symlink-p 'vc-registered 'file-name-case-insensitive-p
         'file-locked-p 'lock-file 'unlock-file 'file-newer-than-file-p 'file-attributes
         'find-backup-file-name 'file-notify-add-watch 'file-executable-p 'file-acl
         'file-selinux-context 'set-file-modes 'set-file-times 'make-directory 'delete-file
         'rename-file 'copy-file 'make-symbolic-link 'add-name-to-file 'set-visited-file-modtime
         'file-system-info)
     nil)
    ('verify-visited-file-modtime t)
    ('visited-file-modtime 0)
    ('file-modes #o444)
    ;; Session plans can be saved (with forge.plan-write); their buffers still open read-only.
    ('file-writable-p (and (string-match-p "\\`forge://plan/session/[^/]+\\.md\\'"
                                           (forge-lsp--normalize (nth 0 args)))
                           t))
    ((or 'file-directory-p 'file-accessible-directory-p) (forge-lsp--directory-p (nth 0 args)))
    ('file-regular-p (forge-lsp--document-p (nth 0 args)))
    ((or 'file-exists-p 'file-readable-p)
     (let ((n (forge-lsp--normalize (nth 0 args))))
       (cond ((forge-lsp--directory-p n) t)
             ((not (forge-lsp--document-p n)) nil)
             (t (let ((server (forge-lsp--document-server)))
                  (and server (condition-case nil (progn (forge-lsp--fetch server n) t)
                                (file-error nil))))))))
    ('file-equal-p (equal (forge-lsp--normalize (nth 0 args)) (forge-lsp--normalize (nth 1 args))))
    ('file-in-directory-p (string-prefix-p (file-name-as-directory (forge-lsp--normalize (nth 1 args)))
                                           (forge-lsp--normalize (nth 0 args))))
    ('insert-file-contents (apply #'forge-lsp--insert-file-contents args))
    ('write-region (apply #'forge-lsp--write-region args))
    ('make-auto-save-file-name
     (expand-file-name (concat "#forge-" (md5 (or buffer-file-name "")) "#") temporary-file-directory))
    ('unhandled-file-name-directory (forge-lsp--fallback-directory))
    ((or 'directory-files 'directory-files-and-attributes) nil)
    ('file-name-all-completions nil)
    ('file-name-completion nil)
    ((or 'process-file 'start-file-process 'make-process 'shell-command 'exec-path)
     (let ((default-directory (forge-lsp--fallback-directory)))
       (apply operation args)))
    (_ (forge-lsp--run-real operation args))))

(put 'forge-lsp--file-name-handler 'operations
     '(expand-file-name substitute-in-file-name file-name-directory file-name-nondirectory
       file-name-as-directory directory-file-name file-truename file-chase-links file-remote-p
       file-symlink-p vc-registered file-name-case-insensitive-p file-locked-p lock-file unlock-file
       file-newer-than-file-p file-attributes find-backup-file-name file-notify-add-watch
       file-executable-p file-acl file-selinux-context set-file-modes set-file-times make-directory
       delete-file rename-file copy-file make-symbolic-link add-name-to-file
       set-visited-file-modtime file-system-info verify-visited-file-modtime visited-file-modtime
       file-modes file-writable-p file-directory-p file-accessible-directory-p file-regular-p
       file-exists-p file-readable-p file-equal-p file-in-directory-p insert-file-contents
       write-region make-auto-save-file-name unhandled-file-name-directory directory-files
       directory-files-and-attributes file-name-all-completions file-name-completion process-file
       start-file-process make-process shell-command exec-path get-file-buffer))

(defun forge-lsp--fallback-directory ()
  "A real directory for processes started from a `forge://' buffer."
  (let ((server (forge-lsp--document-server)))
    (or (and server (project-root (eglot--project server)))
        (expand-file-name "~/"))))

(add-to-list 'file-name-handler-alist
             (cons forge-lsp--file-name-regexp #'forge-lsp--file-name-handler))

;; eglot 1.9 builds file:// URIs from every file name; Forge documents keep their own.
(defun forge-lsp--path-to-uri (fn path)
  (if (forge-lsp--forge-name-p path) (forge-lsp--normalize path) (funcall fn path)))

(defun forge-lsp--uri-to-path (fn uri)
  (if (and (stringp uri) (string-prefix-p "forge:" uri)) uri (funcall fn uri)))

(advice-add 'eglot--path-to-uri :around #'forge-lsp--path-to-uri)
(advice-add 'eglot--uri-to-path :around #'forge-lsp--uri-to-path)

(defvar forge-lsp-document-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-o") #'forge-lsp-follow-link)
    (define-key map (kbd "C-c C-x") #'forge-lsp-execute-plan)
    map))

(define-minor-mode forge-lsp-document-mode
  "A buffer showing a Forge document; its links open with RET or \\[forge-lsp-follow-link]."
  :lighter " Forge-doc"
  :keymap forge-lsp-document-mode-map)

(defconst forge-lsp--link-regexp "\\(?:forge\\|file\\)://[^] \t\n)>\"'`]+")

(defun forge-lsp--link-at (pos)
  (save-excursion
    (goto-char pos)
    (let ((bol (line-beginning-position)) (eol (line-end-position)) found)
      (goto-char bol)
      (while (and (not found) (re-search-forward forge-lsp--link-regexp eol t))
        (when (and (<= (match-beginning 0) pos) (<= pos (match-end 0)))
          (setq found (match-string-no-properties 0))))
      (unless found
        ;; A markdown link [label](forge://...) with point on the label.
        (goto-char bol)
        (while (and (not found)
                    (re-search-forward "\\[[^]\n]*\\](\\(\\(?:forge\\|file\\)://[^)\n]+\\))" eol t))
          (when (and (<= (match-beginning 0) pos) (<= pos (match-end 0)))
            (setq found (match-string-no-properties 1)))))
      found)))

(defun forge-lsp-follow-link (&optional pos)
  "Open the forge:// link at POS (point)."
  (interactive)
  (let ((uri (or (forge-lsp--link-at (or pos (point))) (user-error "No forge:// link here"))))
    (if (string-prefix-p "file://" uri)
        (let ((file (url-unhex-string (url-filename (url-generic-parse-url uri)))))
          ;; A link in a plan or a finding is text an agent wrote: a name that TRAMP
          ;; would open as a remote connection (`/ssh:host:...', `/sudo::...') is refused.
          (when (or (not (file-name-absolute-p file)) (file-remote-p file))
            (user-error "Not a local file: %s" file))
          (find-file file))
      (let ((forge-lsp--last-server (or (and (forge-lsp--live-p forge-lsp--buffer-server)
                                             forge-lsp--buffer-server)
                                        forge-lsp--last-server)))
        (forge-lsp-open-uri uri)))))

(defun forge-lsp--buttonize-links ()
  (with-silent-modifications
    (save-excursion
      (goto-char (point-min))
      (while (re-search-forward forge-lsp--link-regexp nil t)
        (make-text-button (match-beginning 0) (match-end 0)
                          'action (lambda (b) (forge-lsp-follow-link (button-start b)))
                          'follow-link t
                          'help-echo "Open this link")))))

(defun forge-lsp--setup-document-buffer ()
  "Set up a buffer visiting a `forge://' document: read-only, managed, linked."
  (when (forge-lsp--forge-name-p buffer-file-name)
    (let ((server (forge-lsp--document-server)))
      (setq forge-lsp--buffer-server server)
      (when server
        (setq forge-lsp--buffer-root (forge-lsp--server-root server))
        (setq default-directory (file-name-as-directory (project-root (eglot--project server)))))
      (setq buffer-read-only (not forge-lsp--new-plan))
      (setq-local backup-inhibited t)
      (setq-local create-lockfiles nil)
      (auto-save-mode -1)
      (forge-lsp-document-mode 1)
      (forge-lsp--buttonize-links)
      ;; Let the server know the document is open: plan warnings, symbols.
      (when (and (forge-lsp--live-p server) (forge-lsp--virtual-p server) (not eglot--managed-mode))
        (setq eglot--cached-server server)
        (eglot--maybe-activate-editing-mode)))))

(add-hook 'find-file-hook #'forge-lsp--setup-document-buffer)

(defun forge-lsp--view-file-p (file)
  "Non-nil when FILE is a materialized copy under <project>/.forge/view/."
  (and file (not (forge-lsp--forge-name-p file))
       (string-match-p "/\\.forge/view/.+\\.md\\'" file)))

(defun forge-lsp--view-uri (file)
  (when (string-match "/\\.forge/view/\\(.+\\.md\\)\\'" file)
    (concat "forge://" (match-string 1 file))))

(defun forge-lsp--save-view ()
  "`write-contents-functions' of a materialized copy: save through the server.
A session plan is stored with forge.plan-write, unless it changed since
the buffer read it (`forge-lsp--check-unchanged', as for a `forge://'
buffer); other documents are read-only, and the copy on disk is never
overwritten."
  (let ((uri (forge-lsp--view-uri buffer-file-name)))
    (if (not (and uri (string-match "\\`forge://plan/session/\\([^/]+\\)\\.md\\'" uri)))
        (user-error "forge-lsp: %s is a read-only view of %s" (file-name-nondirectory buffer-file-name) uri)
      (let* ((session (match-string 1 uri))
             (server (forge-lsp-current-server))
             (content (buffer-substring-no-properties (point-min) (point-max)))
             ;; Before, the copy was stored at once: a copy read before an agent's
             ;; plan-edit, saved after it, undid that edit (a review).
             (base (if (equal forge-lsp--base-uri uri) (or forge-lsp--base 'unknown) 'unknown)))
        (forge-lsp--check-unchanged uri (and (not (eq base 'unknown)) (forge-lsp--stored-text server uri))
                                    base content)
        (let ((result (forge-lsp-command "plan-write" (list :content content :session_id session) server)))
          (setq forge-lsp--base (or (ignore-errors (forge-lsp--stored-text server uri)) 'unknown))
          (set-buffer-modified-p nil)
          (message "forge: %s" (car (split-string (or (plist-get result :text) "") "\n")))
          t)))))

(defun forge-lsp--note-view-base ()
  "Remember the stored plan a session plan's copy was read with.
That is `forge-lsp--base'.  Run whenever the copy is read: at the visit
and at every revert."
  (let ((uri (forge-lsp--view-uri buffer-file-name)))
    (when (and uri (forge-lsp--session-plan-p uri))
      (let ((server (forge-lsp-current-server t)))
        (setq forge-lsp--base-uri uri
              forge-lsp--base (or (and server (ignore-errors (forge-lsp--stored-text server uri)))
                                  'unknown))))))

(defun forge-lsp--setup-view-buffer ()
  "Set up a buffer visiting a materialized copy of a Forge document.
It is read-only, reverted when the server rewrites it, and saved
through the server."
  (when (forge-lsp--view-file-p buffer-file-name)
    (setq buffer-read-only t)
    (setq-local backup-inhibited t)
    (add-hook 'write-contents-functions #'forge-lsp--save-view nil t)
    (forge-lsp--note-view-base)
    (auto-revert-mode 1)
    (forge-lsp-document-mode 1)
    (forge-lsp--buttonize-links)
    (add-hook 'after-revert-hook #'forge-lsp--buttonize-links nil t)))

(add-hook 'find-file-hook #'forge-lsp--setup-view-buffer)

(defun forge-lsp--refresh-buffers (server uri)
  "Replace the text of buffers showing URI with the server's current text."
  (dolist (buf (buffer-list))
    (with-current-buffer buf
      (when (and buffer-file-name (equal buffer-file-name uri)
                 (or (null forge-lsp--buffer-server) (eq forge-lsp--buffer-server server))
                 ;; Not a buffer of another project whose server is gone.
                 (let ((root (forge-lsp--document-root)))
                   (or (null root) (equal root (forge-lsp--server-root server)))))
        ;; Asked even when the buffer holds unsaved edits: they are kept, and the message
        ;; is for a stored text that is not what the buffer read (the refresh after the
        ;; buffer's own save is not one; a review found it said so).
        (progn
          (jsonrpc-async-request
           server :workspace/textDocumentContent (list :uri uri)
           :success-fn
           (lambda (result)
             (when (buffer-live-p buf)
               (with-current-buffer buf
                 (let ((text (or (plist-get result :text) ""))
                       (inhibit-read-only t))
                   (puthash uri (cons (float-time) text) forge-lsp--content-cache)
                   ;; Edited while the request was out: kept, as when edited before it
                   ;; (a review found such edits replaced and the buffer marked unmodified).
                   (if (buffer-modified-p)
                       (unless (equal text forge-lsp--base)
                         (message "forge: %s changed on the server; your unsaved edits are kept (revert to see it)" uri))
                   (setq forge-lsp--base text
                         forge-lsp--crlf (forge-lsp--crlf-p text))
                   (unless (equal (forge-lsp--shown-text text) (buffer-substring-no-properties (point-min) (point-max)))
                     (let ((new (generate-new-buffer " *forge-refresh*")))
                       (unwind-protect
                           (progn
                             (with-current-buffer new (insert (forge-lsp--shown-text text)))
                             (replace-buffer-contents new))
                         (kill-buffer new)))
                     (set-buffer-modified-p nil)
                     (forge-lsp--buttonize-links)
                     (run-hooks 'forge-lsp-document-refreshed-hook)))))))
           :error-fn (lambda (&rest _) (message "forge: %s is gone" uri))
           :timeout-fn #'ignore))))))

(defvar forge-lsp-document-refreshed-hook nil
  "Run in a `forge://' buffer after its text was refreshed from the server.")

(cl-defmethod eglot-handle-request
  ((server forge-lsp-server) (_method (eql workspace/textDocumentContent/refresh)) &key uri)
  "Re-read URI in the buffers showing it."
  (remhash uri forge-lsp--content-cache)
  (run-at-time 0 nil #'forge-lsp--refresh-buffers server uri)
  nil)

(defun forge-lsp--note-managed ()
  "Remember that forge-lsp manages the current file buffer."
  (when (and eglot--managed-mode buffer-file-name
             (not (forge-lsp--forge-name-p buffer-file-name))
             (cl-typep (eglot-current-server) 'forge-lsp-server))
    (setq forge-lsp--was-managed t)))

(add-hook 'eglot-managed-mode-hook #'forge-lsp--note-managed)

(defun forge-lsp--reattach-documents (server)
  "After (re)connecting SERVER, manage its project's open `forge://' buffers again.
Only those read from an earlier server of the same project, by
`forge-lsp--buffer-root': before, a server of any project took every
detached one, and saving a plan buffer stored it in that project (a
review).  A buffer of a project without a server stays detached; commands
in it say so.  So are the project's file buffers an earlier forge-lsp
server managed, of every major mode (before, only the mode of the buffer
that started the new server was managed again: a review)."
  (when (cl-typep server 'forge-lsp-server)
    (run-at-time 0 nil #'forge-lsp--drain server)
    (setq forge-lsp--last-server server)
    (forge-lsp--install-mode-line)
    (let ((project (eglot--project server))
          (root (forge-lsp--server-root server)))
      (dolist (buf (buffer-list))
        (with-current-buffer buf
          (cond
           ((and (forge-lsp--forge-name-p buffer-file-name)
                 (not eglot--managed-mode)
                 (or (null forge-lsp--buffer-server)
                     (not (jsonrpc-running-p forge-lsp--buffer-server)))
                 (equal (forge-lsp--document-root) root))
            (setq forge-lsp--buffer-server server)
            (when (forge-lsp--virtual-p server)
              (setq eglot--cached-server server)
              (eglot--maybe-activate-editing-mode)))
           ((and forge-lsp--was-managed buffer-file-name
                 (not eglot--managed-mode)
                 (equal (ignore-errors (eglot--current-project)) project))
            (cl-pushnew major-mode (eglot--major-modes server))
            (setq eglot--cached-server nil)
            (eglot--maybe-activate-editing-mode))))))))

(add-hook 'eglot-connect-hook #'forge-lsp--reattach-documents)

(provide 'forge-lsp)
;;; forge-lsp.el ends here
